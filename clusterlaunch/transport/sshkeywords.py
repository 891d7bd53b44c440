"""A keyword ssh does not know: ssh refuses the whole config, paramiko read past it.

ssh ends with "Bad configuration option" at a keyword it does not know (unless
an ``IgnoreUnknown`` pattern names it); paramiko's parser takes any keyword. So a
typo (``StrictHostKeyCheckng yes``, ``ProxyJmp bastion``) left the paramiko client
connecting without the setting, straight to the host or trusting a new key,
where ssh connects nowhere. Keywords some OpenSSH knows pass at once (below:
readconf.c from 7.x to 10.x, Debian's GSSAPI patch, Apple's and HPN-SSH's);
for any other, unless an IgnoreUnknown pattern names it, the local ``ssh -G``
decides, once: refused in its own words, naming the line, or accepted (a
vendor's keyword). Without ssh installed nothing can be asked, and nothing is
refused. A keyword some ssh knows and this machine's does not (Apple's
``UseKeychain`` on Linux, OpenSSH 9.4's ``Tag`` on 9.2) passes as paramiko reads it:
asking ssh for every config would cost each launch ~5 ms (a ``ssh -G``).

A yes/no keyword with another value (``Compression maybe``) makes ssh refuse the
whole config too, in whatever block it is: it is refused here by file and line
(:func:`bad_flag`), where only the value in effect for a host was checked.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable

from clusterlaunch.core.errors import UsageError
from clusterlaunch.transport.sshinclude import ConfigLine, ssh_words

_SPELLINGS = """
    Host Match Include AddKeysToAgent AddressFamily BatchMode BindAddress BindInterface
    CanonicalDomains CanonicalizeFallbackLocal CanonicalizeHostname CanonicalizeMaxDots
    CanonicalizePermittedCNAMEs CASignatureAlgorithms CertificateFile ChannelTimeout
    CheckHostIP Ciphers ClearAllForwardings Compression ConnectionAttempts ConnectTimeout
    ControlMaster ControlPath ControlPersist DynamicForward EnableEscapeCommandline
    EnableSSHKeysign EscapeChar ExitOnForwardFailure FingerprintHash ForkAfterAuthentication
    ForwardAgent ForwardX11 ForwardX11Timeout ForwardX11Trusted GatewayPorts
    GlobalKnownHostsFile HashKnownHosts HostbasedAcceptedAlgorithms HostbasedAuthentication
    HostbasedKeyTypes HostKeyAlgorithms HostKeyAlias HostName IdentitiesOnly IdentityAgent
    IdentityFile IdentityFile2 IgnoreUnknown IPQoS KbdInteractiveAuthentication
    KbdInteractiveDevices KexAlgorithms KnownHostsCommand LocalCommand LocalForward LogLevel
    LogVerbose MACs NoHostAuthenticationForLocalhost NumberOfPasswordPrompts
    ObscureKeystrokeTiming PasswordAuthentication PermitLocalCommand PermitRemoteOpen
    PKCS11Provider Port PreferredAuthentications ProxyCommand ProxyJump ProxyUseFdpass
    PubkeyAcceptedAlgorithms PubkeyAcceptedKeyTypes PubkeyAuthentication RefuseConnection
    RekeyLimit RemoteCommand RemoteForward RequestTTY RequiredRSASize RevokedHostKeys
    SecurityKeyProvider SendEnv ServerAliveCountMax ServerAliveInterval SessionType SetEnv
    SmartcardDevice StdinNull StreamLocalBindMask StreamLocalBindUnlink
    StrictHostKeyChecking SyslogFacility Tag TCPKeepAlive Tunnel TunnelDevice UpdateHostKeys
    User UserKnownHostsFile VerifyHostKeyDNS VisualHostKey WarnWeakCrypto XAuthLocation
    Protocol Cipher FallBackToRsh GlobalKnownHostsFile2 RhostsAuthentication
    UserKnownHostsFile2 UseRoaming UseRsh UsePrivilegedPort AFSTokenPassing
    KerberosAuthentication KerberosTGTPassing RSAAuthentication RhostsRSAAuthentication
    CompressionLevel ChallengeResponseAuthentication SkeyAuthentication TISAuthentication
    DSAAuthentication KeepAlive UseBlacklistedKeys VersionAddendum
    GSSAPIAuthentication GSSAPIDelegateCredentials GSSAPIKeyExchange GSSAPIClientIdentity
    GSSAPIServerIdentity GSSAPIRenewalForcesRekey GSSAPITrustDNS GSSAPIKexAlgorithms
    UseKeychain HPNDisabled HPNBufferSize TcpRcvBufPoll TcpRcvBuf NoneEnabled NoneSwitch
"""
_SPELLED = {name.lower(): name for name in _SPELLINGS.split()}
KNOWN = frozenset(_SPELLED)
"""Every client keyword some OpenSSH (or a common patch of it) knows, in lower case."""


FLAGS = {"yes": True, "true": True, "no": False, "false": False}
"""ssh's yes/no values, in any case (readconf.c's multistate_flag): ssh refuses a config
with another value where it wants one of these ("unsupported option")."""


def flag(value: object) -> bool | None:
    """A yes/no value as ssh reads it: True, False, or None where it is neither (a path,
    ``ask``, ``always``)."""
    return FLAGS.get(str(value).strip().lower())


def spelled(keyword: str) -> str:
    """A keyword (lower case, as parsed) as ssh_config(5) spells it, for messages."""
    return _SPELLED.get(keyword, keyword)


_KEYWORD = re.compile(r"(?m)^[ \t]*([A-Za-z][A-Za-z0-9]*)")
"""A line's keyword (``Keyword value`` or ``Keyword=value``); comments start with ``#``."""


def unknown(text: str, lines: Callable[[], Iterable[ConfigLine]]) -> ConfigLine | None:
    """The first line whose keyword no ssh knows and no IgnoreUnknown pattern names.

    ``text`` is scanned first (0.4 ms for a 2,816-line config): ``lines``, which
    splits every line, is read only where a keyword is not known.
    """
    if not {word.lower() for word in set(_KEYWORD.findall(text))} - KNOWN:
        return None
    patterns: list[str] = []
    for line in lines():
        if line.keyword == "ignoreunknown":
            patterns += [p.lower() for p in line.value.replace(",", " ").split()]
        elif line.keyword and line.keyword not in KNOWN and not _ignored(line.keyword, patterns):
            return line
    return None


_YES_OR_NO = """
    BatchMode CheckHostIP ClearAllForwardings Compression EnableSSHKeysign ExitOnForwardFailure
    ForkAfterAuthentication ForwardX11 ForwardX11Trusted GatewayPorts GSSAPIAuthentication
    GSSAPIDelegateCredentials HashKnownHosts HostbasedAuthentication IdentitiesOnly
    KbdInteractiveAuthentication NoHostAuthenticationForLocalhost PasswordAuthentication
    PermitLocalCommand ProxyUseFdpass StdinNull StreamLocalBindUnlink TCPKeepAlive
    VisualHostKey CanonicalizeFallbackLocal
"""
YES_OR_NO = frozenset(name.lower() for name in _YES_OR_NO.split())
"""Keywords whose only values are yes and no (readconf.c's multistate_flag)."""
_FLAG_LINE = re.compile(r"(?im)^[ \t]*(" + "|".join(YES_OR_NO) + r")(?:[ \t]*=[ \t]*|[ \t]+)(\S+)")


def bad_flag(text: str, lines: Callable[[], Iterable[ConfigLine]]) -> ConfigLine | None:
    """The first yes/no line of another value, in any block: ssh refuses the whole config
    for it, where only the value in effect for a host was checked (``Compression maybe``
    in another host's block passed)."""
    if not any(flag(value) is None for _, value in _FLAG_LINE.findall(text)):
        return None
    for line in lines():
        if line.keyword in YES_OR_NO and flag(line.value.split()[0] if line.value else "") is None:
            return line
    return None


_ONE_ARGUMENT = """
    user hostname port identityfile certificatefile identityagent hostkeyalias bindaddress
    stricthostkeychecking connecttimeout connectionattempts serveraliveinterval
    serveralivecountmax ciphers macs kexalgorithms hostkeyalgorithms casignaturealgorithms
    pubkeyacceptedalgorithms preferredauthentications controlpath controlmaster
    controlpersist addressfamily loglevel requesttty ignoreunknown tunnel escapechar
    forwardagent verifyhostkeydns updatehostkeys canonicalizehostname canonicalizemaxdots
    pkcs11provider sessiontype revokedhostkeys dynamicforward fingerprinthash
    numberofpasswordprompts xauthlocation
"""
_ONE_WORD = YES_OR_NO | frozenset(_ONE_ARGUMENT.split())
"""Keywords of one argument, each seen refused by OpenSSH 9.2's ``ssh -G`` with a second one
("extra arguments at end of line"), in any block (not ProxyJump: 9.2 reads the rest of
the line; nor RekeyLimit, IPQoS, AddKeysToAgent, which take two)."""
_TWO_WORDS = re.compile(r"(?m)^[ \t]*([A-Za-z0-9]+)(?:[ \t]*=[ \t]*|[ \t]+)\S+[ \t]+[^\s#]")
"""A line with two words after its keyword: one scan of the text (the keywords as
alternatives in the pattern cost 7.4 ms for a 3,072-line config, this 1.8 ms)."""


def extra_words(text: str, lines: Callable[[], Iterable[ConfigLine]]) -> ConfigLine | None:
    """The first one-argument line with more (``User alice bob``): ssh refuses the whole
    config, where paramiko logged in as "alice bob". A quoted value is one word."""
    if not any(found[1].lower() in _ONE_WORD for found in _TWO_WORDS.finditer(text)):
        return None  # (the lines are split only where a line may have two words)
    for line in lines():
        if line.keyword in _ONE_WORD and len(ssh_words(line.value)) > 1:
            return line
    return None


def refused_words(line: ConfigLine) -> UsageError:
    """The error for :func:`extra_words`' line."""
    return UsageError(
        f"{line.where}: {spelled(line.keyword)} {line.value}: ssh refuses a second word "
        "here; quote a value with spaces, or remove the rest"
    )


def _ignored(keyword: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(keyword, pattern) for pattern in patterns)


def refused(line: ConfigLine, said: str | None) -> UsageError | None:
    """The error for ``line``, where ``ssh -G`` refused the config (``said``: its words)."""
    if said is None:
        return None
    keyword = line.text.strip().split()[0].split("=")[0]
    return UsageError(
        f"{line.where}: {keyword}: ssh refuses this config ({said}); correct the keyword, "
        "or name it in IgnoreUnknown"
    )


def refused_value(line: ConfigLine) -> UsageError:
    """The error for a yes/no keyword's other value (:func:`bad_flag`)."""
    value = line.value.split()[0] if line.value else ""
    return UsageError(
        f"{line.where}: {spelled(line.keyword)} {value!r}: ssh refuses this value; use yes or no"
    )
