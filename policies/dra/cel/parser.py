"""Expression text -> syntax tree (cel-spec langdef grammar), with macros expanded.

Precedence climbing: a few Python frames per nesting level, and every nesting
(parentheses, brackets, braces, call arguments, the else branch of a ternary) goes
through `expression`, which counts it against limits.MAX_NESTING, so 100,000
nested parentheses end in a CelCompileError, never in a RecursionError. Chains of
&& and || are built balanced, as cel-go does, so a long conjunction stays shallow.
"""

from __future__ import annotations

from policies.dra.cel import ast
from policies.dra.cel.errors import CelCompileError
from policies.dra.cel.lexer import INT64_MAX, Token, syntax_error, tokenize
from policies.dra.cel.limits import MAX_AST_DEPTH, MAX_NESTING

# Binary operators by precedence (higher binds tighter); && and || are separate.
_BINARY = {
    "==": (3, "_==_"),
    "!=": (3, "_!=_"),
    "<": (3, "_<_"),
    "<=": (3, "_<=_"),
    ">": (3, "_>_"),
    ">=": (3, "_>=_"),
    "in": (3, "@in"),
    "+": (4, "_+_"),
    "-": (4, "_-_"),
    "*": (5, "_*_"),
    "/": (5, "_/_"),
    "%": (5, "_%_"),
}
# Methods that are macros, by argument count: (kind, takes two variables).
_METHOD_MACROS = {
    ("all", 2): "all",
    ("exists", 2): "exists",
    ("exists_one", 2): "exists_one",
    ("map", 2): "map",
    ("map", 3): "map",
    ("filter", 2): "filter",
    ("all", 3): "all2",
    ("exists", 3): "exists2",
    ("existsOne", 3): "exists_one2",
    ("transformList", 3): "transform_list",
    ("transformList", 4): "transform_list",
    ("transformMap", 3): "transform_map",
    ("transformMap", 4): "transform_map",
}


def parse(text: str) -> ast.Node:
    return _Parser(text).parse_all()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[Token] = tokenize(text)
        self.at = 0
        self.nesting = 0

    # -- helpers ----------------------------------------------------------------
    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        if token.kind != "eof":
            self.at += 1
        return token

    def expect(self, kind: str) -> Token:
        token = self.peek()
        if token.kind != kind:
            raise self.error(token, f"expected '{kind}'")
        return self.take()

    def error(self, token: Token, what: str) -> CelCompileError:
        shown = "end of input" if token.kind == "eof" else repr(token.text[:40])
        return syntax_error(self.text, token.pos, f"{what}, found {shown}")

    def node(self, node: ast.Node) -> ast.Node:
        ast.with_depth(node)
        if node.depth > MAX_AST_DEPTH:
            raise CelCompileError(
                f"compilation failed: expression nested more than {MAX_AST_DEPTH} levels deep"
            )
        return node

    def enter(self, token: Token) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise syntax_error(
                self.text, token.pos, f"expression nested more than {MAX_NESTING} levels deep"
            )

    def leave(self) -> None:
        self.nesting -= 1

    # -- grammar ----------------------------------------------------------------
    def parse_all(self) -> ast.Node:
        expression = self.expression()
        token = self.peek()
        if token.kind != "eof":
            raise self.error(token, "unexpected input after the expression")
        return expression

    def expression(self) -> ast.Node:
        start = self.peek()
        self.enter(start)
        condition = self.logical("||")
        if self.peek().kind == "?":
            question = self.take()
            when_true = self.logical("||")
            self.expect(":")
            when_false = self.expression()
            condition = self.node(
                ast.Call(question.pos, "_?_:_", None, (condition, when_true, when_false))
            )
        self.leave()
        return condition

    def logical(self, operator: str) -> ast.Node:
        operands = [self.logical("&&") if operator == "||" else self.binary(3)]
        positions = []
        while self.peek().kind == operator:
            positions.append(self.take().pos)
            operands.append(self.logical("&&") if operator == "||" else self.binary(3))
        if len(operands) == 1:
            return operands[0]
        name = "_||_" if operator == "||" else "_&&_"
        return self.balanced(name, operands, positions)

    def balanced(self, name: str, operands: list[ast.Node], positions: list[int]) -> ast.Node:
        # Iterative pairwise reduction: depth log2(n), no recursion on the length.
        while len(operands) > 1:
            paired: list[ast.Node] = []
            paired_positions: list[int] = []
            for index in range(0, len(operands) - 1, 2):
                paired.append(
                    self.node(
                        ast.Call(
                            positions[index], name, None, (operands[index], operands[index + 1])
                        )
                    )
                )
                if index + 2 < len(operands):
                    paired_positions.append(positions[index + 1])
            if len(operands) % 2:
                paired.append(operands[-1])
            operands, positions = paired, paired_positions
        return operands[0]

    def binary(self, minimum: int) -> ast.Node:
        left = self.unary()
        while True:
            token = self.peek()
            entry = _BINARY.get(token.kind)
            if entry is None or entry[0] < minimum:
                return left
            precedence, name = entry
            self.take()
            right = self.binary(precedence + 1)
            left = self.node(ast.Call(token.pos, name, None, (left, right)))

    def unary(self) -> ast.Node:
        token = self.peek()
        if token.kind not in ("!", "-"):
            return self.member()
        count = 0
        while self.peek().kind == token.kind:
            self.take()
            count += 1
            if count > MAX_NESTING:
                raise syntax_error(self.text, token.pos, "too many unary operators in a row")
        following = self.peek()
        if token.kind == "-" and following.kind in ("int", "double"):
            # A minus before a number is part of the literal, so that
            # -9223372036854775808 is an int.
            operand = self.member(negate_literal=True)
            count -= 1
        else:
            operand = self.member()
        name = "!_" if token.kind == "!" else "-_"
        for _ in range(count):
            operand = self.node(ast.Call(token.pos, name, None, (operand,)))
        return operand

    def member(self, negate_literal: bool = False) -> ast.Node:
        operand = self.primary(negate_literal)
        while True:
            token = self.peek()
            if token.kind == ".":
                self.take()
                name = self.expect("ident")
                if self.peek().kind == "(":
                    open_paren = self.take()
                    args = self.arguments(open_paren, ")")
                    operand = self.method(operand, name, args)
                else:
                    operand = self.node(ast.Select(name.pos, operand, name.text))
            elif token.kind == "[":
                self.take()
                index = self.expression()
                self.expect("]")
                operand = self.node(ast.Call(token.pos, "_[_]", None, (operand, index)))
            elif token.kind in (".?", "[?"):
                raise syntax_error(
                    self.text,
                    token.pos,
                    "optional field selection and indexing are not supported by this scheduler",
                )
            else:
                return operand

    def primary(self, negate_literal: bool) -> ast.Node:
        token = self.take()
        kind = token.kind
        if kind in ("int", "uint", "double"):
            value = token.value
            if negate_literal:
                value = -value  # type: ignore[operator]
            elif kind == "int" and value == INT64_MAX + 1:
                raise syntax_error(self.text, token.pos, f"int literal {token.text} out of range")
            return self.node(ast.Literal(token.pos, value))
        if kind in ("string", "bytes"):
            return self.node(ast.Literal(token.pos, token.value))
        if kind == "true" or kind == "false":
            return self.node(ast.Literal(token.pos, kind == "true"))
        if kind == "null":
            return self.node(ast.Literal(token.pos, None))
        if kind == "(":
            inner = self.expression()
            self.expect(")")
            return inner
        if kind == "[":
            elements = self.arguments(token, "]")
            return self.node(ast.ListLiteral(token.pos, tuple(elements)))
        if kind == "{":
            return self.map_literal(token)
        if kind == ".":
            # A leading dot names the root scope (".device"): same as without it here.
            token = self.expect("ident")
            kind = "ident"
        if kind == "ident":
            if self.peek().kind == "(":
                open_paren = self.take()
                args = self.arguments(open_paren, ")")
                return self.function(token, args)
            if self.peek().kind == "{":
                raise syntax_error(
                    self.text, token.pos, "message construction is not supported by this scheduler"
                )
            return self.node(ast.Ident(token.pos, token.text))
        if kind == "in":
            raise self.error(token, "'in' needs a left operand")
        raise self.error(token, "expected an expression")

    def arguments(self, opening: Token, closing: str) -> list[ast.Node]:
        items: list[ast.Node] = []
        while self.peek().kind != closing:
            items.append(self.expression())
            if self.peek().kind == ",":
                self.take()
                continue
            break
        self.expect(closing)
        return items

    def map_literal(self, opening: Token) -> ast.Node:
        entries: list[tuple[ast.Node, ast.Node]] = []
        while self.peek().kind != "}":
            if self.peek().kind == "?":
                raise syntax_error(
                    self.text, self.peek().pos, "optional map entries are not supported"
                )
            key = self.expression()
            self.expect(":")
            entries.append((key, self.expression()))
            if self.peek().kind == ",":
                self.take()
                continue
            break
        self.expect("}")
        return self.node(ast.MapLiteral(opening.pos, tuple(entries)))

    # -- macros -----------------------------------------------------------------
    def function(self, name: Token, args: list[ast.Node]) -> ast.Node:
        if name.text == "has":
            if len(args) != 1 or not isinstance(args[0], ast.Select):
                raise syntax_error(self.text, name.pos, "invalid argument to has() macro")
            selected = args[0]
            return self.node(ast.Select(name.pos, selected.operand, selected.field, True))
        return self.node(ast.Call(name.pos, name.text, None, tuple(args)))

    def method(self, target: ast.Node, name: Token, args: list[ast.Node]) -> ast.Node:
        if isinstance(target, ast.Ident) and target.name == "cel" and name.text == "bind":
            if len(args) != 3:
                raise syntax_error(self.text, name.pos, "cel.bind() takes three arguments")
            var = self.variable(args[0], name)
            return self.node(ast.Comprehension(name.pos, "bind", args[1], var, None, args[2]))
        kind = _METHOD_MACROS.get((name.text, len(args)))
        if kind is None:
            if isinstance(target, ast.Ident) and target.name in (
                "cel",
                "lists",
                "sets",
                "strings",
                "math",
                "optional",
                "base64",
            ):
                # Namespaced functions: `sets.contains(a, b)` is the function
                # "sets.contains", not a method of a variable named sets.
                qualified = f"{target.name}.{name.text}"
                return self.node(ast.Call(name.pos, qualified, None, tuple(args)))
            return self.node(ast.Call(name.pos, name.text, target, tuple(args)))
        two_vars = kind in ("all2", "exists2", "exists_one2", "transform_list", "transform_map")
        var = self.variable(args[0], name)
        var2 = self.variable(args[1], name) if two_vars else None
        rest = args[2:] if two_vars else args[1:]
        predicate = rest[0] if len(rest) == 2 else None
        body = rest[-1]
        if two_vars and var == var2:
            raise syntax_error(self.text, name.pos, f"duplicate variable name '{var}'")
        return self.node(ast.Comprehension(name.pos, kind, target, var, var2, body, predicate))

    def variable(self, node: ast.Node, name: Token) -> str:
        if not isinstance(node, ast.Ident):
            raise syntax_error(self.text, node.pos, f"{name.text}() variable must be a simple name")
        return node.name
