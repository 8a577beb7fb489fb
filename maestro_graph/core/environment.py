"""The environment variables Maestro reads, each with its meaning and default, and the one place that reads them.

Most settings are options (`core/configs.py`, the commands', `ServeSettings`), the registry YAML or a run's context.
These are the ones a process takes from its environment: what the Agent Server graphs of `langgraph.json` serve
(they have no command line), where local models live and run, and the expert cache's two command-line defaults. A
module that needs one reads it here (`EnvVar.read`); an operator's key variable, whose name a setting holds
(`api_key_env`), is read with `named`. docs/environment.md is the table of `ENVIRONMENT`
(`tests/test_environment.py` keeps it current).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "API_KEY", "BENCH_KEYS", "CACHE_DIR", "CACHE_TTL_S", "DEVICE", "ENVIRONMENT", "IMAGE_DIRS", "IMAGE_HOSTS",
    "MODELS_DIR", "POLICIES", "POLICY", "REGISTRY", "SUITE_OWNER_KEYS", "TRUST_SUITE_UNSET_KEY", "EnvVar", "named",
    "table",
]


@dataclass(frozen=True)
class EnvVar:
    """One environment variable: its name, the value that holds when it is unset, what it means and who reads it."""

    name: str
    default: str
    meaning: str
    read_by: str

    def read(self, environ: Mapping[str, str] | None = None) -> str:
        """Its value in `environ` (default: the process's environment), or `default` when unset."""
        return (os.environ if environ is None else environ).get(self.name, self.default)


REGISTRY = EnvVar("MAESTRO_REGISTRY", "", "the registry YAML of the graphs the Agent Server serves; empty: the "
                  "packaged registry", "graphs/ (`agents.served_maestro`)")
POLICIES = EnvVar("MAESTRO_POLICIES", "neural,rules", "the policies a run of the served graphs may name, "
                  "comma-separated, each `NAME` or `NAME=SPEC`", "graphs/ (`PolicyCatalog.from_env`)")
POLICY = EnvVar("MAESTRO_POLICY", "", "the served graphs' default policy, one of those offered; empty: the first "
                "offered", "graphs/ (`PolicyCatalog.from_env`)")
IMAGE_DIRS = EnvVar("MAESTRO_IMAGE_DIRS", "", "directories (separated by `os.pathsep`: `:`, on Windows `;`) whose "
                    "image files a client of the served graphs or the tool may name; empty: none",
                    "graphs/, `maestro_tool` (`ImageSources.from_env`)")
IMAGE_HOSTS = EnvVar("MAESTRO_IMAGE_HOSTS", "", "hosts (comma-separated, `name` or `name:port`) whose http(s) image "
                     "URLs those clients may send; empty: none, data URLs only", "graphs/, `maestro_tool` "
                     "(`ImageSources.from_env`)")
API_KEY = EnvVar("MAESTRO_API_KEY", "", "the API keys of `maestro serve`, comma-separated, one per client; empty: "
                 "no key needed (the variable's name is `--api-key-env`'s default)", "`maestro serve` "
                 "(`ServeSettings.api_keys`)")
MODELS_DIR = EnvVar("MAESTRO_MODELS_DIR", "~/.cache/maestro-graph/models", "where local transformers models are "
                    "unpacked, one folder per file content", "`backends.hf.models_dir`")
DEVICE = EnvVar("MAESTRO_DEVICE", "auto", "where local transformers models run: `cpu`, `cuda`, `cuda:1`, ...; "
                "`auto`: `cuda` when torch sees a GPU, else `cpu`", "`backends.hf.default_device`")
CACHE_DIR = EnvVar("MAESTRO_CACHE_DIR", ".maestro-cache", "the expert-call cache's folder: `--cache-dir`'s "
                   "default", "the commands' `--cache-dir` (`cli/options.py`)")
CACHE_TTL_S = EnvVar("MAESTRO_CACHE_TTL_S", str(7 * 24 * 3600), "seconds a Redis cache entry lives: "
                     "`--cache-ttl-s`'s default", "the commands' `--cache-ttl-s` (`cli/options.py`)")
SUITE_OWNER_KEYS = EnvVar("MAESTRO_SUITE_OWNER_KEYS", "", "the keys of the server `maestro reliability`'s thread "
                          "ownership check starts (set by the check itself)", "`reliability.traffic`")
TRUST_SUITE_UNSET_KEY = EnvVar("MAESTRO_TRUST_SUITE_UNSET_KEY", "", "a key variable the trust suite names and "
                               "leaves unset (it removes it)", "`reliability.trust`")
BENCH_KEYS = EnvVar("MAESTRO_BENCH_KEYS", "", "the keys of the server `scripts/bench_traffic.py` starts (set by "
                    "the script for that server)", "`scripts/bench_traffic.py`")

ENVIRONMENT = (REGISTRY, POLICIES, POLICY, IMAGE_DIRS, IMAGE_HOSTS, API_KEY, MODELS_DIR, DEVICE, CACHE_DIR,
               CACHE_TTL_S, SUITE_OWNER_KEYS, TRUST_SUITE_UNSET_KEY, BENCH_KEYS)
"""Every `MAESTRO_*` variable, in the order of docs/environment.md's table."""


def named(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of the variable a setting names (an API key's, `api_key_env`), "" when unset."""
    return (os.environ if environ is None else environ).get(name, "")


def table() -> str:
    """`ENVIRONMENT` as docs/environment.md's Markdown table."""
    rows = [f"| `{v.name}` | {f'`{v.default}`' if v.default else '(empty)'} | {v.meaning} | {v.read_by} |"
            for v in ENVIRONMENT]
    return "\n".join(["| variable | default | meaning | read by |", "|---|---|---|---|", *rows])
