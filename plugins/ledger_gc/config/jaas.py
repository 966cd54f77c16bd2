"""A JAAS login configuration file, read as the JVM reads it, and its ZooKeeper login.

Pulsar brokers and BookKeeper bookies take their ZooKeeper SASL identity from a JAAS file
(``-Djava.security.auth.login.config=...``) whose ``Client`` section (ZooKeeper's default
``zookeeper.sasl.clientconfig``) names one login module with its options::

    Client {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      username="bookkeeper"
      password="secret";
    };

``LEDGERGC_ZK_JAAS`` points at the same file, so an operator says their identity once.
The syntax is the JDK's ``ConfigFile``: sections ``Name { entries } ;``, each entry a
module class, a flag (``required``, ``requisite``, ``sufficient``, ``optional``) and
``key=value`` options up to a ``;``; values quoted with ``"`` or ``'`` (backslash
escapes) or bare; ``//`` and ``/* */`` comments. A ``${property}`` value (a JVM system
property the JVM would expand) cannot be expanded outside the JVM and is refused.

Pure: text in, values out; every error is one ``ConfigError`` naming the file, the line
and column and the kind of token, never its text (a slip can put the password anywhere).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ledger_gc.errors import ConfigError

#: ZooKeeper's default client section (``zookeeper.sasl.clientconfig``).
CLIENT_SECTION = "Client"
FLAGS = ("required", "requisite", "sufficient", "optional")
DIGEST_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
#: The JDK's Kerberos module, and IBM's JDK's.
KERBEROS_MODULES = (
    "com.sun.security.auth.module.Krb5LoginModule",
    "com.ibm.security.auth.module.Krb5LoginModule",
)
DIGEST_MD5 = "DIGEST-MD5"
GSSAPI = "GSSAPI"

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<line_comment>(?://|\#)[^\n]*)
    | (?P<block_comment>/\*.*?\*/)
    | (?P<quoted>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<punct>[{};=])
    | (?P<word>[^\s{};="']+)
    """,
    re.VERBOSE | re.DOTALL,
)


@dataclass(frozen=True)
class LoginModule:
    """One entry of a section: the module's class, its flag and its options."""

    name: str
    flag: str
    #: The module's options; a password among them, so out of the ``repr``.
    options: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class ZooKeeperLogin:
    """What a ``Client`` section says about the ZooKeeper SASL login."""

    mechanism: str  # DIGEST-MD5 or GSSAPI
    username: str | None = None  # DIGEST-MD5's user, or the Kerberos principal
    #: DIGEST-MD5 only. Out of the ``repr``: ``ZkEndpoint.login()`` hands this to any
    #: layer below the edge, where a log line or an error may show the login.
    password: str | None = field(default=None, repr=False)
    keytab: str | None = None  # Kerberos only (the module's keyTab option)


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "quoted" or the punctuation itself
    text: str
    line: int
    column: int  # 1-based, in characters

    def where(self) -> str:
        return f"line {self.line}, column {self.column}"

    def described(self) -> str:
        """What the token is, never what it says: a slip can put a password anywhere,
        so an error names a word or a quoted value by its kind and position alone (the
        grammar's punctuation is no one's secret)."""
        if self.kind == "word":
            return "a word"
        if self.kind == "quoted":
            return "a quoted value"
        return repr(self.text)


#: What each place of the grammar expects, as an error says it.
_WHAT = {"word": "a word", "quoted": "a quoted value"}


def _tokens(text: str, where: str) -> list[_Token]:
    tokens: list[_Token] = []
    line, line_start = 1, 0
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        column = position - line_start + 1
        if match is None:  # an unterminated quote or comment
            raise ConfigError(
                f"{where} line {line}, column {column}: unterminated quote or comment; it "
                "is not a JAAS login configuration"
            )
        kind = match.lastgroup or ""
        token = match.group()
        if kind == "quoted":
            tokens.append(_Token("quoted", _unquote(token[1:-1]), line, column))
        elif kind == "punct":
            tokens.append(_Token(token, token, line, column))
        elif kind == "word":
            tokens.append(_Token("word", token, line, column))
        newlines = token.count("\n")
        if newlines:
            line += newlines
            line_start = position + token.rindex("\n") + 1
        position = match.end()
    return tokens


def _unquote(body: str) -> str:
    return re.sub(r"\\(.)", r"\1", body, flags=re.DOTALL)


def parse(text: str, where: str = "the JAAS file") -> dict[str, list[LoginModule]]:
    """Every section of a JAAS file: name -> its login modules, in order.

    An error names the file, the line and column, what was expected and the kind of
    token found (a word, a quoted value, a punctuation mark), never a word's or a
    value's text: a misplaced password is one of them."""
    tokens = _tokens(text, where)
    sections: dict[str, list[LoginModule]] = {}
    position = 0

    def expect(*kinds: str, what: str | None = None) -> _Token:
        nonlocal position
        wanted = what or " or ".join(_WHAT.get(kind, repr(kind)) for kind in kinds)
        if position >= len(tokens):
            last = tokens[-1].line if tokens else 1
            raise ConfigError(
                f"{where} line {last}: the file ends where {wanted} was expected; it is "
                "not a complete JAAS login configuration"
            )
        token = tokens[position]
        if token.kind not in kinds:
            raise ConfigError(
                f"{where} {token.where()}: {wanted} expected, found {token.described()}; "
                "a section is Name { module flag key=value ...; };"
            )
        position += 1
        return token

    while position < len(tokens):
        name = expect("word", what="a section name").text
        expect("{")
        modules: list[LoginModule] = []
        while position < len(tokens) and tokens[position].kind != "}":
            module = expect("word", what="a login module's class")
            flag = expect("word", what="a login module flag")
            if flag.text.lower() not in FLAGS:
                raise ConfigError(
                    f"{where} {flag.where()}: the word after the login module's class is "
                    f"not a login module flag ({', '.join(FLAGS)})"
                )
            options: dict[str, str] = {}
            while position < len(tokens) and tokens[position].kind != ";":
                key = expect("word", what="an option name")
                expect("=")
                value = expect("word", "quoted", what="an option value")
                if "${" in value.text:
                    # The value is not shown: it may be a password that holds a "${".
                    raise ConfigError(
                        f"{where} {value.where()}: the value of {key.text} names a JVM "
                        "system property (${...}), which only the JVM expands; write the "
                        "value itself"
                    )
                options[key.text] = value.text
            expect(";")
            modules.append(LoginModule(module.text, flag.text.lower(), options))
        expect("}")
        if position < len(tokens) and tokens[position].kind == ";":
            position += 1  # the JDK requires it; a missing one is forgiven
        if name in sections:
            raise ConfigError(f"{where}: section {name!r} appears twice")
        sections[name] = modules
    return sections


def zookeeper_login(
    text: str, where: str = "the JAAS file", section: str = CLIENT_SECTION
) -> ZooKeeperLogin:
    """The ZooKeeper client login of a JAAS file's ``section`` (``Client``).

    ``DigestLoginModule`` is DIGEST-MD5 with its ``username`` and ``password``; the JDK's
    ``Krb5LoginModule`` is GSSAPI with its ``principal`` and ``keyTab``. Any other module
    (or none, or several) is refused: ledger-gc cannot run a JVM login module.
    """
    sections = parse(text, where)
    modules = sections.get(section)
    if modules is None:
        names = ", ".join(sorted(sections)) or "none"
        raise ConfigError(
            f"{where} has no {section} section (sections: {names}); ZooKeeper clients read "
            f"their login from {section} {{ ... }};"
        )
    if len(modules) != 1:
        raise ConfigError(
            f"{where}: section {section} has {len(modules)} login modules; ledger-gc reads "
            "one (DigestLoginModule or Krb5LoginModule)"
        )
    module = modules[0]
    options = module.options
    if module.name == DIGEST_MODULE:
        missing = [key for key in ("username", "password") if not options.get(key)]
        if missing:
            raise ConfigError(
                f"{where}: section {section}'s DigestLoginModule has no {' or '.join(missing)}"
            )
        return ZooKeeperLogin(DIGEST_MD5, options["username"], options["password"])
    if module.name in KERBEROS_MODULES:
        return ZooKeeperLogin(
            GSSAPI, options.get("principal") or None, keytab=options.get("keyTab") or None
        )
    raise ConfigError(
        f"{where}: section {section} uses {module.name}, which ledger-gc cannot run; it "
        f"reads {DIGEST_MODULE} (DIGEST-MD5) and Krb5LoginModule (GSSAPI)"
    )
