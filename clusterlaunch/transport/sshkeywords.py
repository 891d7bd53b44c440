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
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable

from clusterlaunch.core.errors import UsageError
from clusterlaunch.transport.sshinclude import ConfigLine

KNOWN = frozenset(
    """
    host match include addkeystoagent addressfamily batchmode bindaddress bindinterface
    canonicaldomains canonicalizefallbacklocal canonicalizehostname canonicalizemaxdots
    canonicalizepermittedcnames casignaturealgorithms certificatefile channeltimeout
    checkhostip ciphers clearallforwardings compression connectionattempts connecttimeout
    controlmaster controlpath controlpersist dynamicforward enableescapecommandline
    enablesshkeysign escapechar exitonforwardfailure fingerprinthash forkafterauthentication
    forwardagent forwardx11 forwardx11timeout forwardx11trusted gatewayports
    globalknownhostsfile hashknownhosts hostbasedacceptedalgorithms hostbasedauthentication
    hostbasedkeytypes hostkeyalgorithms hostkeyalias hostname identitiesonly identityagent
    identityfile identityfile2 ignoreunknown ipqos kbdinteractiveauthentication
    kbdinteractivedevices kexalgorithms knownhostscommand localcommand localforward loglevel
    logverbose macs nohostauthenticationforlocalhost numberofpasswordprompts
    obscurekeystroketiming passwordauthentication permitlocalcommand permitremoteopen
    pkcs11provider port preferredauthentications proxycommand proxyjump proxyusefdpass
    pubkeyacceptedalgorithms pubkeyacceptedkeytypes pubkeyauthentication refuseconnection
    rekeylimit remotecommand remoteforward requesttty requiredrsasize revokedhostkeys
    securitykeyprovider sendenv serveralivecountmax serveraliveinterval sessiontype setenv
    smartcarddevice stdinnull streamlocalbindmask streamlocalbindunlink
    stricthostkeychecking syslogfacility tag tcpkeepalive tunnel tunneldevice updatehostkeys
    user userknownhostsfile verifyhostkeydns visualhostkey warnweakcrypto xauthlocation
    protocol cipher fallbacktorsh globalknownhostsfile2 rhostsauthentication
    userknownhostsfile2 useroaming usersh useprivilegedport afstokenpassing
    kerberosauthentication kerberostgtpassing rsaauthentication rhostsrsaauthentication
    compressionlevel challengeresponseauthentication skeyauthentication tisauthentication
    dsaauthentication keepalive useblacklistedkeys versionaddendum
    gssapiauthentication gssapidelegatecredentials gssapikeyexchange gssapiclientidentity
    gssapiserveridentity gssapirenewalforcesrekey gssapitrustdns gssapikexalgorithms
    usekeychain hpndisabled hpnbuffersize tcprcvbufpoll tcprcvbuf noneenabled noneswitch
    """.split()  # noqa: SIM905 (a list literal of 150 words is 150 lines)
)
"""Every client keyword some OpenSSH (or a common patch of it) knows, in lower case."""

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
