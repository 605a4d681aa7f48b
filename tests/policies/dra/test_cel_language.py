"""The CEL language subset: literals, operators, errors as values, macros, libraries."""

from __future__ import annotations

import pytest

from policies.dra.cel.selector import CelCompileError, CelEvaluationError, compile_selector
from tests.policies.dra.cel_helpers import device, run

TRUE_EXPRESSIONS = [
    # literals and escapes
    r'"a\tb" == "a\u0009b" && "\x41\101" == "AA" && r"\n" == "\\n"',
    "'''multi\nline''' == \"multi\\nline\"",
    r'b"\xff\000" == b"\377\x00" && size(b"abc") == 3 && bytes("é") == b"\xc3\xa9"',
    "0x1F == 31 && 7u == 7u && 1.5e1 == 15.0 && .5 == 0.5 && null == null",
    "-9223372036854775808 < 9223372036854775807",
    "[1, 2][1] == 2 && {'a': 1}['a'] == 1 && "
    "{dyn(1): 'x', dyn(true): 'y'}[true] == 'y' && {dyn(1): 'x', dyn(true): 'y'}[1] == 'x'",
    # arithmetic (Go semantics: truncation toward zero)
    "7 / 2 == 3 && -7 / 2 == -3 && -7 % 2 == -1 && 7 % -2 == 1 && 2 * 3 - 1 == 5",
    "5u - 2u == 3u && 1.0 / 0.0 > 1e308 && 0.1 + 0.2 > 0.3",
    "'ab' + 'c' == 'abc' && [1] + [2] == [1, 2] && b'a' + b'b' == b'ab'",
    # comparison, including Kubernetes' cross-type numeric comparisons
    "1 < 1.5 && 2u > 1 && 'a' < 'b' && b'a' < b'b' && false < true && 1 == 1",
    "dyn(1) == 1.0 && dyn(1u) == 1 && dyn('1') != 1 && [1, 2] != [2, 1]",
    # in, size, conversions
    "2 in [1, 2] && 'k' in {'k': 1} && !(3 in [1, 2]) && size('héllo') == 5",
    "int('42') == 42 && uint(3) == 3u && double('2.5') == 2.5 && string(12) == '12'",
    "int(2.9) == 2 && int(-2.9) == -2 && string(true) == 'true' && bool('false') == false",
    "string(1.5) == '1.5' && string(b'ok') == 'ok' && dyn([1])[0] == 1",
    # ternary, logic
    "(1 > 0 ? 'y' : 'n') == 'y' && !false && (true || false) && !(true && false)",
    # macros
    "[1, 2, 3].all(x, x > 0) && [1, 2, 3].exists(x, x == 2) && [1, 2, 3].exists_one(x, x > 2)",
    "[1, 2, 3].map(x, x * 2) == [2, 4, 6] && [1, 2, 3].filter(x, x % 2 == 1) == [1, 3]",
    "[1, 2, 3].map(x, x > 1, x * 10) == [20, 30] && {'a': 1}.all(k, k == 'a')",
    "[5, 6].all(i, v, v > i) && [5, 6].exists(i, v, i == 1 && v == 6)",
    "[5, 6].existsOne(i, v, v == 5) && [1, 2].transformList(i, v, i + v) == [1, 3]",
    "{'a': 1}.transformMap(k, v, v + 1) == {'a': 2} && has({'a': 1}.a) && !has({'a': 1}.b)",
    "cel.bind(x, 2, x * x == 4) && cel.bind(x, [1, 2], x.all(y, y > 0))",
    # strings (standard + ext.Strings v2 + regex library)
    "'hello'.startsWith('he') && 'hello'.endsWith('lo') && 'hello'.contains('ell')",
    "'h100-sxm'.matches('^h[0-9]+') && matches('abc', 'b') && !'abc'.matches('^b')",
    "'abc'.charAt(1) == 'b' && 'abc'.charAt(3) == '' && 'abcabc'.indexOf('c') == 2",
    "'abcabc'.lastIndexOf('c') == 5 && 'abcabc'.indexOf('a', 1) == 3 && "
    "'AbC'.lowerAscii() == 'abc'",
    "'abc'.upperAscii() == 'ABC' && 'aaa'.replace('a', 'b') == 'bbb' && "
    "'aaa'.replace('a', 'b', 1) == 'baa'",
    "'a,b,c'.split(',') == ['a', 'b', 'c'] && 'a,b,c'.split(',', 2) == ['a', 'b,c']",
    "'abcdef'.substring(2) == 'cdef' && 'abcdef'.substring(1, 3) == 'bc' && '  x '.trim() == 'x'",
    "['a', 'b'].join() == 'ab' && ['a', 'b'].join('-') == 'a-b' && "
    "strings.quote('a\"') == '\"a\\\\\"\"'",
    "'gpu-123'.find('[0-9]+') == '123' && 'a1b22'.findAll('[0-9]+') == ['1', '22']",
    "'a1b22c3'.findAll('[0-9]+', 2) == ['1', '22'] && 'abc'.find('z') == ''",
    # Kubernetes lists, ext.Sets, ext.Lists
    "[1, 2, 3].isSorted() && [3, 1].sum() == 4 && [3, 1].min() == 1 && [3, 1].max() == 3",
    "[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [].sum() == 0",
    "sets.contains([1, 2, 3], [2, 3]) && sets.equivalent([1, 2], [2, 1, 1]) && "
    "sets.intersects([1], [1, 5])",
    "lists.range(3) == [0, 1, 2] && [1, 2, 3].slice(1, 3) == [2, 3] && "
    "[[1], [2, 3]].flatten() == [1, 2, 3]",
    "[1, 1, 2].distinct() == [1, 2] && [1, 2].reverse() == [2, 1] && [3, 1, 2].sort() == [1, 2, 3]",
    # quantity and semver
    "quantity('1Gi').compareTo(quantity('1024Mi')) == 0 && "
    "quantity('500m').isLessThan(quantity('1'))",
    "quantity('1').add(quantity('500m')) == quantity('1500m') && "
    "quantity('2').sub(1) == quantity('1')",
    "quantity('-1').sign() == -1 && quantity('1.5').asApproximateFloat() == 1.5 && "
    "isQuantity('1Ki')",
    "!isQuantity('1KB') && quantity('4k').asInteger() == 4000 && !quantity('0.5').isInteger()",
    "semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3",
    "semver('1.0.0').isLessThan(semver('1.0.1')) && "
    "semver('2.0.0').compareTo(semver('1.9.9')) == 1",
    "semver('v01.2', true) == semver('1.2.0') && !isSemver('1.2') && isSemver('1.2', true)",
]


@pytest.mark.parametrize("expression", TRUE_EXPRESSIONS)
def test_language_feature(expression: str) -> None:
    assert run(expression, device()) is True


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9223372036854775807 + 1 == 0", "integer overflow"),
        ("-9223372036854775808 - 1 == 0", "integer overflow"),
        ("9223372036854775807 * 2 == 0", "integer overflow"),
        ("-(-9223372036854775807 - 1) == 0", "integer overflow"),
        ("0u - 1u == 0u", "unsigned integer overflow"),
        ("1 / 0 == 0", "division by zero"),
        ("1 % 0 == 0", "modulus by zero"),
        ("[1][2] == 0", "index out of range"),
        ("{'a': 1}['b'] == 1", "no such key: b"),
        ("int('x') == 1", "cannot convert"),
        ("int(1e19) == 1", "range"),
        ("quantity('1KB').sign() == 0", "quantity"),
        ("semver('1.2').major() == 1", "could not parse semver"),
        ("'abc'.substring(2, 1) == ''", "invalid substring range"),
        ("'abc'.charAt(9) == ''", "index out of range"),
        ("[].min() == 0", "empty list"),
        ("'a'.matches(dyn('('))", "invalid regular expression"),
        ("{dyn(1): 1, dyn(1): 2}.size() == 1", "repeated key"),
        ("dyn(1) && true", "no such overload"),
        ("dyn('x').size() == 1 && dyn(1).startsWith('a')", "no such overload"),
    ],
)
def test_runtime_errors(expression: str, message: str) -> None:
    with pytest.raises(CelEvaluationError, match=message):
        run(expression, device())


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 + 'a' == 2", "no matching overload for '_+_' applied to '(int, string)'"),
        ("device.driver == 1", "no matching overload for '_==_'"),
        ("'a'.size() == 'b'", "no matching overload"),
        ("[1, 'a'].size() == 2", "expected type 'int' but found 'string'"),
        ("{'a': 1, 'b': 'x'}.size() == 2", "expected type 'int' but found 'string'"),
        ("{1.5: 1}.size() == 1", "unsupported map key type"),
        ("unknownVar", "undeclared reference to 'unknownVar'"),
        ("nothing(1)", "undeclared reference to 'nothing'"),
        ("'x'.format([]) == 'x'", "not supported by this scheduler"),
        ("timestamp('2024-01-01T00:00:00Z') == 1", "not supported"),
        ("device.driver.foo == 1", "does not support field selection"),
        ("1.all(x, x)", "cannot be the range of a comprehension"),
        ("[1].all(x, x + 1)", "expected type 'bool'"),
        ("'a'.matches('(')", "invalid regular expression"),
        ("'a'.matches('(a)\\\\1')", "invalid regular expression"),
        ("1 ? true : false", "no matching overload for '_?_:_'"),
        ("true ? 1 : 'a'", "no matching overload for '_?_:_'"),
        ("'abc' + 1", "no matching overload"),
        ("[1].map(1, 2)", "must be a simple name"),
        ("has(device)", "invalid argument to has"),
        ("device.?driver", "optional"),
        ("Msg{a: 1}", "message construction"),
        ("if", "reserved identifier"),
        ("1 ==", "Syntax error"),
        ("'unterminated", "unterminated string"),
        ("'\\q'", "invalid escape"),
        ("9223372036854775808 > 0", "out of range"),
        ("18446744073709551616u > 0u", "out of range"),
        ("1 @ 2", "token recognition error"),
        ("'a' 'b'", "unexpected input"),
        ("3", "must evaluate to bool"),
        ("'x'", "must evaluate to bool or the unknown type, not string"),
        ("[true]", "not list(bool)"),
    ],
)
def test_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError) as caught:
        compile_selector(expression)
    assert message in caught.value.message


def test_compile_errors_give_line_and_column() -> None:
    with pytest.raises(CelCompileError, match=r"2:3: undeclared reference to 'nope'"):
        compile_selector("true &&\n  nope")


def test_a_dynamic_result_that_is_not_bool_is_a_runtime_error() -> None:
    with pytest.raises(CelEvaluationError, match="could not be converted to bool"):
        run('device.attributes["dra.example.com"].name', device(attributes={"name": 1}))


def test_logical_operators_absorb_errors_on_either_side() -> None:
    assert run("false && 1 / 0 == 1", device()) is False
    assert run("1 / 0 == 1 && false", device()) is False
    assert run("true || 1 / 0 == 1", device()) is True
    assert run("1 / 0 == 1 || true", device()) is True
    with pytest.raises(CelEvaluationError):
        run("1 / 0 == 1 && true", device())
    with pytest.raises(CelEvaluationError):
        run("false || 1 / 0 == 1", device())
    # all/exists: a deciding element hides an error elsewhere; none decides: error.
    assert run("[0, 1].exists(x, 1 / x == 1)", device()) is True
    assert run("[1, 0].all(x, 1 / x == 2)", device()) is False
    with pytest.raises(CelEvaluationError):
        run("[0, 1].all(x, 1 / x == 1)", device())


def test_ternary_evaluates_only_the_chosen_branch() -> None:
    assert run("true ? true : 1 / 0 == 1", device()) is True
