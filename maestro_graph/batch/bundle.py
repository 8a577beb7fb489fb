"""The driver's registry as files a Ray worker unpacks on its own node: the registry config (its `extends:` chain
merged into one file), the skill folders it scans that are not in the package, and the profile and reach it reads.
Shipped once per job through Ray's object store and unpacked once per node under its content digest, so a node
needs the package and nothing else, as with the images that travel with each item (docs/scale.md: Nodes that share
no disk).

Whatever is in the installed package (`package:` paths, the packaged skills and the default registry's profile) is
named, not shipped: every node has it. Paths inside model cards (a plug-in expert's options) are the card's own and
are shipped as written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import yaml

from ..core.bundled import Bundled, bundled_dir
from ..errors import ConfigError
from ..registry.config import PACKAGE_PREFIX, load_config, resolve_path
from ..registry.reach import reach_path

__all__ = ["RegistryBundle", "MAX_BUNDLE_BYTES"]

MAX_BUNDLE_BYTES = 64 * 2**20
"""The most a registry's own files (skill folders outside the package, profile, reach) may weigh: they go to every
node; a model's weights belong in the image or behind an endpoint, not in a skill folder."""
_CONFIG = "registry.yaml"
_PROFILE = "registry.profile.json"
_PACKAGE = resolve_path(PACKAGE_PREFIX, Path(".")).resolve()


@dataclass(frozen=True)
class RegistryBundle:
    """A registry as files by relative path, with the digest of their names and contents."""

    files: dict[str, bytes]
    digest: str

    @classmethod
    def of(cls, config_path: Path, *, profiled: bool = True) -> RegistryBundle:
        """The bundle of the registry file at `config_path` as the driver sees it (the registry it extends
        included); a bundle over MAX_BUNDLE_BYTES is a ConfigError naming the largest folder."""
        config = load_config(config_path)
        files: dict[str, bytes] = {}
        skill_dirs = []
        for index, folder in enumerate(config.skill_paths()):
            packaged = _packaged(folder)
            if packaged is not None:
                skill_dirs.append(packaged)
                continue
            skill_dirs.append(f"skills/{index}")
            for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
                files[f"skills/{index}/{path.relative_to(folder).as_posix()}"] = path.read_bytes()
        profile = config.profile_to_read() if profiled else None
        if profile is not None and _packaged(profile) is None:
            files[_PROFILE] = profile.read_bytes()
            if reach_path(profile).is_file():
                files[str(reach_path(Path(_PROFILE)))] = reach_path(profile).read_bytes()
        size = sum(map(len, files.values()))
        if size > MAX_BUNDLE_BYTES:
            raise ConfigError(f"the registry's own files weigh {size / 2**20:.0f} MiB, above the "
                              f"{MAX_BUNDLE_BYTES // 2**20} MiB every Ray worker is sent; keep model weights out of "
                              f"skill folders (in the image, or behind an endpoint)", file=str(config_path))
        named = (_packaged(profile) if profile is not None else None) or (_PROFILE if _PROFILE in files else None)
        files[_CONFIG] = yaml.safe_dump({
            "models": [card.model_dump(mode="json") for card in config.models], "skill_dirs": skill_dirs,
            "skills": config.skills, "skill_timeout_s": config.skill_timeout_s, "profile": named,
        }, sort_keys=False).encode()
        digest = hashlib.sha256()
        for name in sorted(files):
            digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
        return cls(files, digest.hexdigest()[:32])

    def unpack(self, root: Path) -> Path:
        """The registry file of this bundle under `root/<digest>`, written there once per node: the first worker
        writes a folder of its own and renames it into place, so workers starting together never see half of it."""
        target = root / self.digest
        if not (target / _CONFIG).is_file():
            root.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(dir=root, prefix=".partial-"))
            for name, data in self.files.items():
                path = partial / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            try:
                os.rename(partial, target)
            except OSError:  # another worker of this node was first: its copy is the same bytes
                shutil.rmtree(partial, ignore_errors=True)
        return target / _CONFIG


def _packaged(path: Path) -> str | None:
    """`package:REL` for a path inside the installed package or one of the folders it ships (the packaged skills),
    which every node has; else None."""
    resolved = path.resolve()
    for name in get_args(Bundled):
        folder = bundled_dir(name).resolve()
        if resolved.is_relative_to(folder):
            rel = resolved.relative_to(folder)
            return PACKAGE_PREFIX + (name if rel == Path(".") else f"{name}/{rel.as_posix()}")
    try:
        return PACKAGE_PREFIX + resolved.relative_to(_PACKAGE).as_posix()
    except ValueError:
        return None
