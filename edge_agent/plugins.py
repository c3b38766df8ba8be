"""The one plugin loader: code a config names as "package.module:attribute".

Configs may name a backchannel classifier or tool factories by dotted path; that is a
deliberate power of whoever writes the config (call files cannot do it). Loading imports the
module and returns the attribute; every failure is a ConfigError naming the file, the key and
what to do.
"""

from __future__ import annotations

import importlib

from edge_agent.errors import ConfigError


def load_plugin(spec: str, source: str, key: str, what: str) -> object:
    """The object `spec` ("package.module:attribute", or "package.module.attribute") names.
    `what` describes it for error messages ("a classifier class", "a tool factory")."""
    spec = spec.strip()
    if ":" in spec:
        module_name, _, attribute = spec.partition(":")
    else:
        module_name, _, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise ConfigError(source, key, f"{spec!r} is not a dotted path to {what}; write it as "
                          "'package.module:Name'")
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
    return found
