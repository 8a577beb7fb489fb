"""The environment variables Maestro reads, each with its meaning and default, and the one place that reads them.

Most settings are options (`core/configs.py`, the commands', `ServeSettings`), the registry YAML or a run's context.
These are the ones a process takes from its environment: what the Agent Server graphs of `langgraph.json` serve
(they have no command line), where local models live and run, and the expert cache's two command-line defaults. A
module that needs one reads it here (`EnvVar.read`); an operator's key variable, whose name a setting holds
(`api_key_env`), is read with `named`. Other libraries' variables that Maestro reads or sets for its process
(thread counts, the hub offline) are declared here too (`LIBRARY_ENVIRONMENT`) and set through `EnvVar` or
`set_process_defaults`: no other module touches `os.environ`. docs/environment.md holds the tables of both
(`tests/test_environment.py` keeps them current and the rest of the package off `os.environ`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = [
    "API_KEY", "BENCH_KEYS", "CACHE_DIR", "CACHE_TTL_S", "DEVICE", "ENVIRONMENT", "HF_HUB_DISABLE_PROGRESS_BARS",
    "HF_HUB_OFFLINE", "IMAGE_DIRS", "IMAGE_HOSTS", "LIBRARY_ENVIRONMENT", "MODELS_DIR", "OMP_NUM_THREADS", "POLICIES",
    "POLICY", "RAY_JOB_CONFIG", "REGISTRY", "SUITE_OWNER_KEYS", "TOKENIZERS_PARALLELISM", "TRL_EXPERIMENTAL_SILENCE",
    "TRUST_SUITE_UNSET_KEY", "EnvVar", "named", "present", "set_process_defaults", "sources", "table",
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

    def set(self, value: str) -> None:
        """Set it for this process and the processes it starts from now on."""
        os.environ[self.name] = value

    def set_default(self, value: str) -> None:
        """Set it to `value` unless it is set already (the user's value wins)."""
        os.environ.setdefault(self.name, value)

    def unset(self) -> None:
        """Remove it from this process's environment (nothing happens when it is unset)."""
        os.environ.pop(self.name, None)

    @contextmanager
    def set_while(self, value: str) -> Iterator[None]:
        """Set it for the `with` block (a server started there reads it), then remove it."""
        self.set(value)
        try:
            yield
        finally:
            self.unset()


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
                   "default", "the commands' `--cache-dir` (`doors/cli/options.py`)")
CACHE_TTL_S = EnvVar("MAESTRO_CACHE_TTL_S", str(7 * 24 * 3600), "seconds a Redis cache entry lives: "
                     "`--cache-ttl-s`'s default", "the commands' `--cache-ttl-s` (`doors/cli/options.py`)")
SUITE_OWNER_KEYS = EnvVar("MAESTRO_SUITE_OWNER_KEYS", "", "the keys of the server `maestro reliability`'s thread "
                          "ownership check starts (set by the check itself)", "`reliability.traffic`")
TRUST_SUITE_UNSET_KEY = EnvVar("MAESTRO_TRUST_SUITE_UNSET_KEY", "", "a key variable the trust suite names and "
                               "leaves unset (it removes it)", "`reliability.trust`")
BENCH_KEYS = EnvVar("MAESTRO_BENCH_KEYS", "", "the keys of the server `scripts/bench_traffic.py` starts (set by "
                    "the script for that server)", "`scripts/bench_traffic.py`")

ENVIRONMENT = (REGISTRY, POLICIES, POLICY, IMAGE_DIRS, IMAGE_HOSTS, API_KEY, MODELS_DIR, DEVICE, CACHE_DIR,
               CACHE_TTL_S, SUITE_OWNER_KEYS, TRUST_SUITE_UNSET_KEY, BENCH_KEYS)
"""Every `MAESTRO_*` variable, in the order of docs/environment.md's table."""

# Other libraries' variables: their default is the library's own (empty here: unset)
OMP_NUM_THREADS = EnvVar("OMP_NUM_THREADS", "", "threads per OpenMP library; RapidOCR's onnxruntime engines take "
                         "their thread count from it (empty: every core); the commands set `1` unless it is set",
                         "`experts.rapid_ocr`, `set_process_defaults`, `maestro bench`")
HF_HUB_OFFLINE = EnvVar("HF_HUB_OFFLINE", "", "Hugging Face hub: no network calls; the commands set `1` unless it "
                        "is set", "`set_process_defaults`")
TOKENIZERS_PARALLELISM = EnvVar("TOKENIZERS_PARALLELISM", "", "Hugging Face tokenizers' own threads (and their "
                                "warning after a fork); the commands set `false` unless it is set",
                                "`set_process_defaults`")
HF_HUB_DISABLE_PROGRESS_BARS = EnvVar("HF_HUB_DISABLE_PROGRESS_BARS", "", "Hugging Face progress bars off; "
                                      "`maestro serve` sets `1` (a bar's carriage returns break log lines)",
                                      "`serve.observability.configure_logging`")
TRL_EXPERIMENTAL_SILENCE = EnvVar("TRL_EXPERIMENTAL_SILENCE", "", "TRL's warning about its experimental features "
                                  "off; GRPO training sets `1` unless it is set", "`rl.trl_phases.run_grpo`")
RAY_JOB_CONFIG = EnvVar("RAY_JOB_CONFIG_JSON_ENV_VAR", "", "the Ray job's configuration (JSON, set by `ray job "
                        "submit`): the variables its runtime environment already gives the workers",
                        "`batch.executors` (Ray workers)")

LIBRARY_ENVIRONMENT = (OMP_NUM_THREADS, HF_HUB_OFFLINE, TOKENIZERS_PARALLELISM, HF_HUB_DISABLE_PROGRESS_BARS,
                       TRL_EXPERIMENTAL_SILENCE, RAY_JOB_CONFIG)
"""The other libraries' variables Maestro reads or sets, in the order of docs/environment.md's second table."""


def named(name: str, environ: Mapping[str, str] | None = None) -> str:
    """The value of the variable a setting names (an API key's, `api_key_env`), "" when unset."""
    return (os.environ if environ is None else environ).get(name, "")


def present(names: Iterable[str]) -> dict[str, str]:
    """Those of `names` that are set in the process's environment, with their values (a worker's copy of them)."""
    return {name: os.environ[name] for name in names if name in os.environ}


def set_process_defaults() -> None:
    """What a command's process sets unless the user did: one OpenMP thread per library (two cores are easily
    oversubscribed by concurrent expert calls), the Hugging Face hub offline, no tokenizer threads."""
    OMP_NUM_THREADS.set_default("1")
    HF_HUB_OFFLINE.set_default("1")
    TOKENIZERS_PARALLELISM.set_default("false")


def sources(variables: Iterable[EnvVar] = ENVIRONMENT) -> list[tuple[EnvVar, str, str]]:
    """Each variable with the value this process reads and where it comes from (`environment` or `default`)."""
    return [(v, v.read(), "environment" if v.name in os.environ else "default") for v in variables]


def table(variables: Iterable[EnvVar] = ENVIRONMENT) -> str:
    """`variables` (default: `ENVIRONMENT`) as one of docs/environment.md's Markdown tables."""
    rows = [f"| `{v.name}` | {f'`{v.default}`' if v.default else '(empty)'} | {v.meaning} | {v.read_by} |"
            for v in variables]
    return "\n".join(["| variable | default | meaning | read by |", "|---|---|---|---|", *rows])
