"""CEL tokens (cel-spec langdef "Syntax": identifiers, numbers, strings and bytes with
their escapes, operators, comments). Iterative: no input makes it recurse."""

from __future__ import annotations

import re
from dataclasses import dataclass

from policies.dra.cel.errors import CelCompileError
from policies.dra.cel.values import CelUint

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

# Reserved words of the spec: an identifier may not be one of them.
RESERVED = frozenset(
    [
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)
PUNCTUATION = (
    "==",
    "!=",
    "<=",
    ">=",
    "&&",
    "||",
    ".?",
    "[?",
    "<",
    ">",
    "!",
    "+",
    "-",
    "*",
    "/",
    "%",
    "?",
    ":",
    ".",
    ",",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
)
_NUMBER = re.compile(
    r"0[xX][0-9a-fA-F]+[uU]?"
    r"|(?:[0-9]+\.[0-9]+|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|[0-9]+[eE][+-]?[0-9]+"
    r"|[0-9]+[uU]?"
)
_IDENT = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_SPACE = re.compile(r"(?:[ \t\n\r\f\v]+|//[^\n]*)+")
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "`": "`",
    "?": "?",
}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "ident", "int", "uint", "double", "string", "bytes", "eof" or the punctuation
    text: str
    value: object
    pos: int


def position(text: str, offset: int) -> str:
    """ "line:column" (1-based) of an offset, as cel-go's messages show it."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"{line}:{column}"


def syntax_error(text: str, offset: int, what: str) -> CelCompileError:
    return CelCompileError(f"compilation failed: {position(text, offset)}: Syntax error: {what}")


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    at = 0
    end = len(text)
    while True:
        space = _SPACE.match(text, at)
        if space:
            at = space.end()
        if at >= end:
            tokens.append(Token("eof", "", None, at))
            return tokens
        char = text[at]
        if char.isdigit() or (char == "." and at + 1 < end and text[at + 1].isdigit()):
            tokens.append(_number(text, at))
        elif char in "\"'" or (char in "rRbB" and _string_starts(text, at)):
            tokens.append(_string(text, at))
        elif char == "_" or ("a" <= char <= "z") or ("A" <= char <= "Z"):
            match = _IDENT.match(text, at)
            assert match is not None
            word = match.group()
            if word in RESERVED:
                raise syntax_error(text, at, f"reserved identifier '{word}'")
            kind = "ident"
            if word in ("true", "false", "null", "in"):
                kind = word
            tokens.append(Token(kind, word, None, at))
            at = match.end()
            continue
        else:
            for punct in PUNCTUATION:
                if text.startswith(punct, at):
                    tokens.append(Token(punct, punct, None, at))
                    break
            else:
                raise syntax_error(text, at, f"token recognition error at: {char!r}")
        at += len(tokens[-1].text)


def _string_starts(text: str, at: int) -> bool:
    # r"..", b"..", rb"..", br"..", and their capitals.
    prefix = text[at : at + 3]
    for length in (1, 2):
        head, quote = prefix[:length], prefix[length : length + 1]
        if quote in ("'", '"') and head.lower() in ("r", "b", "rb", "br"):
            return True
    return False


def _number(text: str, at: int) -> Token:
    match = _NUMBER.match(text, at)
    if match is None:
        raise syntax_error(text, at, "malformed number")
    literal = match.group()
    after = match.end()
    if after < len(text) and (text[after].isalnum() or text[after] == "_"):
        raise syntax_error(text, at, f"malformed number {text[at : after + 1]!r}")
    lowered = literal.lower()
    if lowered.startswith("0x") or not any(c in lowered for c in ".e"):
        unsigned = lowered.endswith("u")
        digits = lowered[:-1] if unsigned else lowered
        value = int(digits, 16) if digits.startswith("0x") else int(digits, 10)
        if unsigned:
            if value > UINT64_MAX:
                raise syntax_error(text, at, f"uint literal {literal} out of range")
            return Token("uint", literal, CelUint(value), at)
        # INT64_MAX + 1 is allowed here: only a leading minus makes it valid.
        if value > INT64_MAX + 1:
            raise syntax_error(text, at, f"int literal {literal} out of range")
        return Token("int", literal, value, at)
    try:
        number = float(literal)
    except (ValueError, OverflowError):
        raise syntax_error(text, at, f"malformed double {literal}") from None
    return Token("double", literal, number, at)


def _string(text: str, at: int) -> Token:
    start = at
    raw = is_bytes = False
    while text[at] in "rRbB":
        if text[at] in "rR":
            raw = True
        else:
            is_bytes = True
        at += 1
    quote = text[at : at + 3] if text[at : at + 3] in ('"""', "'''") else text[at]
    at += len(quote)
    triple = len(quote) == 3
    pieces: list[str] = []
    end = len(text)
    while True:
        if at >= end:
            raise syntax_error(text, start, "unterminated string literal")
        if text.startswith(quote, at):
            at += len(quote)
            break
        char = text[at]
        if char == "\n" and not triple:
            raise syntax_error(text, start, "newline in a single-quoted string literal")
        if char == "\\" and not raw:
            decoded, at = _escape(text, at, is_bytes)
            pieces.append(decoded)
            continue
        if char == "\\" and raw and at + 1 < end:
            # In a raw string a backslash is kept, and the next character cannot
            # end the string.
            pieces.append(text[at : at + 2])
            at += 2
            continue
        pieces.append(char)
        at += 1
    body = "".join(pieces)
    if is_bytes:
        # Text characters become their UTF-8; \x and octal escapes were mapped to
        # code points 0-255 standing for one byte each (see _escape).
        data = bytearray()
        for char in body:
            if "\udc00" <= char <= "\udcff":
                data.append(ord(char) - 0xDC00)
            else:
                data.extend(char.encode("utf-8", "surrogatepass"))
        return Token("bytes", text[start:at], bytes(data), start)
    if any("\ud800" <= c <= "\udfff" for c in body):
        raise syntax_error(text, start, "string literal holds an invalid code point")
    return Token("string", text[start:at], body, start)


def _escape(text: str, at: int, is_bytes: bool) -> tuple[str, int]:
    if at + 1 >= len(text):
        raise syntax_error(text, at, "unterminated escape sequence")
    code = text[at + 1]
    if code in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[code], at + 2
    if code in "xX":
        digits, width = text[at + 2 : at + 4], 2
    elif code == "u" and not is_bytes:
        digits, width = text[at + 2 : at + 6], 4
    elif code == "U" and not is_bytes:
        digits, width = text[at + 2 : at + 10], 8
    elif code in "0123":
        octal = text[at + 1 : at + 4]
        if len(octal) != 3 or any(c not in "01234567" for c in octal):
            raise syntax_error(text, at, "invalid octal escape sequence")
        return _byte_or_char(int(octal, 8), is_bytes), at + 4
    else:
        raise syntax_error(text, at, f"invalid escape sequence '\\{code}'")
    if len(digits) != width or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise syntax_error(text, at, "invalid hexadecimal escape sequence")
    number = int(digits, 16)
    if width == 2:
        return _byte_or_char(number, is_bytes), at + 2 + width
    if number > 0x10FFFF or 0xD800 <= number <= 0xDFFF:
        raise syntax_error(text, at, "invalid unicode code point in escape sequence")
    return chr(number), at + 2 + width


def _byte_or_char(number: int, is_bytes: bool) -> str:
    # In bytes, \xff is the byte 0xff, carried through as a lone surrogate that no
    # source text can contain; in strings it is the code point U+00FF.
    return chr(0xDC00 + number) if is_bytes else chr(number)
