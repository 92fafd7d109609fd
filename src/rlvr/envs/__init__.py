"""Environments for multi-turn episodes (tool use): the reset/step protocol, tools with JSON schemas, tool-call
parsers, and a registry of environments by name. Single-turn tasks run in the trivial ``single_turn`` environment.

    from rlvr.envs import make_env, register_env, register_tool, function_tool, Environment, Step
"""

from rlvr.envs.adapters import VerifiersEnv, openai_tools
from rlvr.envs.base import Environment, Limits, Message, SingleTurnEnv, Step
from rlvr.envs.calculator import calculate, calculator_tool
from rlvr.envs.parsers import CallError, Parsed, ToolCall, format_names, parse_calls, register_format
from rlvr.envs.registry import SINGLE_TURN, env_names, make_env, register_env, unregister_env
from rlvr.envs.tool_env import ToolEnv, register_tool, resolve_tool, tool_names, unregister_tool
from rlvr.envs.python_tool import python_tool
from rlvr.envs.search import search_tool
from rlvr.envs.sql_tool import sql_tool
from rlvr.envs.tools import Tool, ToolResult, function_tool

register_env(SINGLE_TURN)(SingleTurnEnv)
register_tool("calculator")(calculator_tool)
register_tool("python")(python_tool)
register_tool("sql")(sql_tool)
register_tool("search")(search_tool)

__all__ = [
    "CallError", "Environment", "Limits", "Message", "Parsed", "SINGLE_TURN", "SingleTurnEnv", "Step", "Tool",
    "ToolCall", "ToolEnv", "ToolResult", "calculate", "calculator_tool", "env_names", "format_names",
    "function_tool", "make_env", "parse_calls", "python_tool", "search_tool", "sql_tool", "register_env", "register_format", "register_tool", "resolve_tool",
    "tool_names", "unregister_env", "unregister_tool", "VerifiersEnv", "openai_tools",
]
