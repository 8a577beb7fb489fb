"""Settings of `maestro serve`, separate from the app they configure. Every limit is a named, documented field, and
each field is an option of `maestro serve` (configs.typer_options), declared nowhere else."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ...core.configs import (
    DEFAULT_CHECKPOINTS_KEPT,
    DEFAULT_EPISODES_KEPT,
    DEFAULT_MAX_COST,
    DEFAULT_MAX_TURNS,
    MAX_COST,
    MAX_EPISODES_KEPT,
    MAX_TURNS,
)
from ...core.environment import API_KEY, named
from ...images.load import DECODE_MEMORY_BYTES
from ...images.sources import DECODE_WAIT_S, ImageSources, host_entry
from ...policy.catalog import DEFAULT_POLICY, SERVED_POLICIES, PolicyCatalog
from ...registry.reach import REACH_FLOOR

__all__ = ["ServeSettings", "startup_problem"]


class ServeSettings(BaseModel):
    """How the OpenAI-compatible app runs episodes and what it accepts. Defaults suit one CPU machine on loopback."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_name: str = Field("maestro", min_length=1, description="the model id clients send and /v1/models lists")
    api_key_env: str = Field(
        API_KEY.name,
        description="environment variable holding the API key, or several separated by commas (one per client); "
        "when it is set and non-empty every /v1 and /maestro request needs `Authorization: Bearer <key>`, and a "
        "thread belongs to the key that made it (another key gets 404)",
    )
    openapi_docs: bool = Field(
        False, description="serve the OpenAPI description and its pages (/openapi.json, /docs, /redoc), open to "
        "anyone who can reach the port like /healthz and /metrics (off: those paths are 404)")
    policy: str = Field(DEFAULT_POLICY, description="default policy (a request may name another offered one)")
    policies: tuple[str, ...] = Field(
        SERVED_POLICIES,
        description="the policies a request may name: `NAME` or `NAME=SPEC` (SPEC: any policy name, e.g. "
        "`fast=fixed:rapidocr@@chart-qa`); checkpoints, LM configs and endpoint URLs come only from here",
    )
    max_turns: int = Field(DEFAULT_MAX_TURNS, ge=1, le=MAX_TURNS,
                           description="default and largest turn budget of an episode")
    max_cost: float = Field(DEFAULT_MAX_COST, ge=0, le=MAX_COST, description="default cost budget of an episode")
    reach_floor: float = Field(
        REACH_FLOOR, ge=0, le=1, description="stop an episode before its next call where the registry's reach "
        "(`maestro registry profile`) says no pair not yet called answers questions like it "
        "(MaestroContext.reach_floor; 0: off)")
    max_body_bytes: int = Field(20_000_000, gt=0, description="largest request body (413 above)")
    max_image_bytes: int = Field(8_000_000, gt=0, description="largest decoded image (413 above)")
    max_images: int = Field(8, ge=1, description="most distinct images in one request, its question's and those of "
                            "the latest 8 turns of its history together (413 above)")
    max_messages: int = Field(256, ge=1, description="most messages in one chat request, its history included (413 "
                              "above); only the latest 8 earlier turns are read, the rest are not decoded or stored")
    decode_memory_mb: int = Field(
        DECODE_MEMORY_BYTES // 1_000_000, ge=1, description="memory the images being decoded and the episodes "
        "working on images may take at once, across every request of the process (a decode holds its estimate, from "
        "the size and format the file declares; a running episode its working set, images.load.working_set_bytes; "
        "one larger than this runs alone)")
    decode_wait_s: float = Field(
        DECODE_WAIT_S, ge=0, description="how long checking a request's image waits for room in decode_memory_mb "
        "before the request is answered 503 `server_busy` with Retry-After (admitted episodes wait for room)")
    max_episodes: int = Field(
        64, ge=1, description="episodes admitted at once, running or queued for a worker (429 when full)"
    )
    workers: int = Field(2, ge=1, description="threads that run episodes; the rest of the admitted ones wait")
    request_timeout_s: float = Field(300.0, gt=0, description="wall-clock limit of one request, queueing included")
    allowed_image_hosts: tuple[str, ...] = Field(
        (),
        description="hosts (`name`, `name:port`, an IPv6 address with or without brackets, `[IPv6]:port`) whose "
        "http(s) image URLs are fetched; every other remote URL and every local path is refused",
    )
    fetch_timeout_s: float = Field(10.0, gt=0, description="time limit for fetching one allow-listed image URL, "
                                   "the whole fetch (a host trickling bytes is cut off at it)")
    image_dirs: tuple[Path, ...] = Field(
        (), description="directories whose image files a request may name by path (default: none, data URLs only)"
    )
    checkpoint_db: Path | str | None = Field(
        None, description="checkpoints: a SQLite file, or a postgresql:// URL that several replicas share; episodes "
        "get thread ids and resume after a crash (on any replica, with Postgres)"
    )
    episodes_kept: int = Field(
        DEFAULT_EPISODES_KEPT, ge=1, le=MAX_EPISODES_KEPT, description="the most finished episodes a thread keeps "
        "(the latest): each checkpoint of a long thread stays bounded (MaestroContext.episodes_kept)")
    checkpoints_kept: int = Field(
        DEFAULT_CHECKPOINTS_KEPT, ge=1, description="with a SQLite checkpoint_db: the checkpoints a thread keeps "
        "once an episode ends (the latest; a resumed or replayed question needs only the last), so a long thread's "
        "file stays bounded; a Postgres thread keeps its latest only (LangGraph's prune)")
    image_retention_days: float | None = Field(
        None, gt=0, description="with a checkpoint_db, whose threads keep each image once by content digest: "
        "delete a stored image not read for this many days (a follow-up about it then asks for it again; default: "
        "kept as long as the database)")
    thread_lease_s: int = Field(
        10, ge=3, le=600, description="with a postgresql:// checkpoint_db, where one replica at a time runs a "
        "thread: how long a thread stays held after its replica's host vanished without closing its connection (a "
        "killed process frees its threads at once); also the Retry-After of a 409 `thread_busy`"
    )
    langserve_path: str = Field("/maestro", pattern=r"^/[a-z0-9/_-]*$", description="where LangServe routes go")

    @field_validator("allowed_image_hosts")
    @classmethod
    def _host_entries(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        """Each entry in the form URLs are matched in (`images.sources.host_entry`), so a bad one stops the start."""
        return tuple(host_entry(h) for h in hosts)

    @field_validator("image_dirs")
    @classmethod
    def _directories(cls, dirs: tuple[Path, ...]) -> tuple[Path, ...]:
        """A file named as an image directory is a mistake to stop on, not a folder that matches nothing."""
        files = [str(d) for d in dirs if d.exists() and not d.is_dir()]
        if files:
            raise ValueError(f"{files[0]} is a file, not a directory")
        return dirs

    @model_validator(mode="after")
    def _check(self) -> ServeSettings:
        if self.workers > self.max_episodes:
            raise ValueError(
                f"workers={self.workers} exceeds max_episodes={self.max_episodes}; a worker would never get work. "
                "Lower workers or raise max_episodes"
            )
        return self

    def catalog(self) -> PolicyCatalog:
        """The offered policies (the default among them); every spec is built once, here."""
        return PolicyCatalog.parse(self.policies, default=self.policy)

    def image_sources(self) -> ImageSources:
        return ImageSources(allowed_dirs=self.image_dirs, allowed_hosts=self.allowed_image_hosts,
                            max_images=self.max_images, max_image_bytes=self.max_image_bytes,
                            fetch_timeout_s=self.fetch_timeout_s, decode_wait_s=self.decode_wait_s)

    def api_keys(self) -> tuple[str, ...]:
        """The keys from the environment (empty: no key needed), read per request so a restart is not needed to
        rotate them."""
        return tuple(k.strip() for k in named(self.api_key_env).split(",") if k.strip())


def startup_problem(settings: ServeSettings, host: str, *, key_env_named: bool) -> str | None:
    """Why starting would serve unauthenticated by accident, or None: the operator named a key variable that is
    unset, or the server listens beyond loopback with no key. (`maestro serve --insecure` skips this check.)"""
    if settings.api_keys():
        return None
    if key_env_named:
        return (f"--api-key-env {settings.api_key_env}: that environment variable is unset or empty, so the server "
                "would accept every request; set it, or pass --insecure to serve without a key")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        return (f"--host {host} listens beyond loopback but {settings.api_key_env} is unset, so anyone who can reach "
                "the port could run episodes; set the key (see --api-key-env), or pass --insecure")
    return None
