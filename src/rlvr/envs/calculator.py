"""The calculator tool: arithmetic on numbers with + - * / // % ** and parentheses, evaluated from the syntax tree
(never ``eval``) with bounds on the expression's length and the size of every intermediate number, so it runs
inline in bounded time and memory on any input."""

from __future__ import annotations

import ast
import math
import operator

from rlvr.envs.tools import Tool

MAX_CHARS = 200
MAX_DIGITS = 100
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. "37*58" or "(2+3)**2/5"."""
    if len(expression) > MAX_CHARS:
        raise ValueError(f"the expression is longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot parse {expression.strip()!r} as arithmetic") from None
    value = _eval(tree.body)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("the result is not a finite number")
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(round(value, 10))
    return str(value)


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _bounded(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or (abs(left) > 1 and abs(right) * math.log10(abs(left)) > MAX_DIGITS)):
            raise ValueError("the power is too large")
        try:
            return _bounded(_BINARY[type(node.op)](left, right))
        except ZeroDivisionError:
            raise ValueError("division by zero") from None
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported syntax: {type(node).__name__} (only numbers, + - * / // % ** and parentheses)")


def _bounded(value: int | float | complex) -> int | float:
    if isinstance(value, complex):
        raise ValueError("the result is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_DIGITS * 3.33:
        raise ValueError(f"a number has more than {MAX_DIGITS} digits")
    return value


def calculator_tool(name: str = "calculator") -> Tool:
    return Tool(name, "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
                {"type": "object", "properties": {"expression": {"type": "string", "description": "e.g. 37*58"}},
                 "required": ["expression"]}, calculate, isolation="inline")
