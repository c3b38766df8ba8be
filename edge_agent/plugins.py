"""The one plugin loader: code a config names as "package.module:attribute".

Configs may name a backchannel classifier, a summarizer or tool factories by dotted path; that
is a deliberate power of whoever writes the config (call files cannot do it). Before anything is
called, the target's shape is checked: it must come from the user's own code (not the standard
library: "os:remove" or "os:system" would run with the agent's arguments), be a Python class or
function (not a built-in) and accept the arguments it will be called with. Every failure is a
ConfigError naming the file, the key and what to do.
"""

from __future__ import annotations

import importlib
import inspect
import sys

from edge_agent.errors import ConfigError

_SYSTEM_MODULES = frozenset(sys.stdlib_module_names) | {"builtins", "_io"}


def load_plugin(spec: str, source: str, key: str, what: str, *,
                call_with: tuple[object, ...] | None = None) -> object:
    """The object `spec` ("package.module:attribute", or "package.module.attribute") names,
    refused if it is not the user's code. With `call_with`, it must also be a class or function
    that can be called with those arguments (checked without calling it). `what` describes it
    for error messages ("a classifier class", "a tool factory")."""
    spec = spec.strip()
    if ":" in spec:
        module_name, _, attribute = spec.partition(":")
    else:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise ConfigError(source, key, f"{spec!r} is not a dotted path to {what}; write it as "
                          "'package.module:Name'")
    _refuse_system(module_name, spec, source, key, what)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise ConfigError(source, key, f"module {module_name!r} (from {spec!r}) not found: "
                              "install the package that provides it or add its directory to "
                              "PYTHONPATH") from None
        raise ConfigError(source, key, f"importing {module_name!r} failed: {exc}. Install "
                          "what it needs") from None
    except Exception as exc:  # any import-time failure is the user's module, reported as such
        raise ConfigError(source, key, f"importing {module_name!r} failed: "
                          f"{type(exc).__name__}: {exc}. Fix that module") from None
    found: object = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigError(source, key, f"module {module_name!r} has no {attribute!r} (from "
                              f"{spec!r}): check the name after the module") from None
    origin = getattr(found, "__module__", None) or ""
    if inspect.isbuiltin(found) or (isinstance(origin, str) and _is_system(origin)):
        raise ConfigError(source, key, f"{spec!r} is {_described(found)} from Python itself, "
                          f"not {what}: name one defined in your own package")
    if call_with is not None:
        check_callable(found, call_with, spec, source, key, what)
    return found


def check_callable(found: object, call_with: tuple[object, ...], spec: str, source: str,
                   key: str, what: str) -> None:
    """`found` is a Python class or function that takes `call_with`; ConfigError otherwise."""
    if not (inspect.isclass(found) or inspect.isfunction(found)):
        raise ConfigError(source, key, f"{spec!r} is {_described(found)}, not {what}: name a "
                          "class or a function")
    try:
        inspect.signature(found).bind(*call_with)
    except TypeError:
        shape = f"({', '.join(type(a).__name__ for a in call_with)})" if call_with else "()"
        raise ConfigError(source, key, f"{spec!r} cannot be called with {shape} as {what} is; "
                          "check its parameters") from None
    except ValueError:  # no signature to read: not Python code we can check
        raise ConfigError(source, key, f"{spec!r} has no readable signature; {what} must be "
                          "a Python class or function") from None


def _refuse_system(module_name: str, spec: str, source: str, key: str, what: str) -> None:
    if _is_system(module_name):
        raise ConfigError(source, key, f"{spec!r} names Python's own module "
                          f"{module_name.split('.')[0]!r}, not {what}: name one defined in your "
                          "own package")


def _is_system(module_name: str) -> bool:
    return module_name.split(".")[0] in _SYSTEM_MODULES


def _described(found: object) -> str:
    if inspect.isbuiltin(found):
        return "a built-in function"
    if inspect.isclass(found):
        return "a class"
    if inspect.isfunction(found):
        return "a function"
    return f"a {type(found).__name__}"
