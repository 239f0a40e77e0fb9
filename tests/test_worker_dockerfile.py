"""worker-image/Dockerfile holds to what it declares, and the nvidia-smi stand-in reports a driver.

The curio source is not in this repository, so the Dockerfile's pins cannot be checked against
extern/cuzk/rust-toolchain.toml here: the Dockerfile quotes each toolchain file next to the ARG
that pins it, and these tests hold the ARGs, the stages that use them and the requirement
labels to those quotes. They read the file only; nothing is built.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "worker-image" / "Dockerfile"
NVIDIA_SMI = REPO / "vastsim" / "standins" / "nvidia-smi"


# ------------------------------------------------------------------ the Dockerfile, parsed


def instructions(text: str) -> list[tuple[str, str, str]]:
    """(INSTRUCTION, arguments, the comment block just above it), continuations joined."""
    out: list[tuple[str, str, str]] = []
    comment: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and line.startswith("#"):
            comment.append(line.lstrip("#").strip())
            continue
        if not pending and not line:
            comment = []
            continue
        pending += (" " if pending else "") + line.removesuffix("\\").strip()
        if line.endswith("\\"):
            continue
        word, _, rest = pending.partition(" ")
        out.append((word.upper(), rest.strip(), " ".join(comment)))
        pending, comment = "", []
    return out


INSTRUCTIONS = instructions(DOCKERFILE.read_text())


def global_args() -> dict[str, tuple[str, str]]:
    """ARG name -> (default, its comment), for the ARGs before the first FROM."""
    args: dict[str, tuple[str, str]] = {}
    for word, rest, comment in INSTRUCTIONS:
        if word == "FROM":
            break
        if word == "ARG" and "=" in rest:
            name, value = rest.split("=", 1)
            args[name] = (value.strip('"'), comment)
    return args


def stages() -> dict[str, list[tuple[str, str, str]]]:
    """Stage name ('' for the last, unnamed one) -> its instructions, FROM first."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    current: list[tuple[str, str, str]] | None = None
    for item in INSTRUCTIONS:
        if item[0] == "FROM":
            match = re.search(r"\bAS (\S+)$", item[1])
            current = out.setdefault(match.group(1) if match else "", [])
        if current is not None:
            current.append(item)
    return out


ARGS = global_args()
STAGES = stages()


def stage_text(name: str) -> str:
    return "\n".join(f"{word} {rest}" for word, rest, _ in STAGES[name])


def quoted_toolchain(comment: str) -> tuple[str, list[str]]:
    """The channel and components a comment quotes from a rust-toolchain.toml."""
    channel = re.search(r'channel = "([^"]+)"', comment)
    components = re.search(r"components = \[([^\]]*)\]", comment)
    assert channel and components, comment
    return channel.group(1), re.findall(r'"([^"]+)"', components.group(1))


@pytest.mark.parametrize(
    ("version_arg", "components_arg", "source"),
    [
        ("RUST_VERSION", "RUST_COMPONENTS", "extern/cuzk/rust-toolchain.toml"),
        ("FFI_RUST_VERSION", "FFI_RUST_COMPONENTS", "extern/filecoin-ffi/rust/rust-toolchain.toml"),
    ],
)
def test_rust_toolchains_match_the_files_they_quote(
    version_arg: str, components_arg: str, source: str
) -> None:
    version, comment = ARGS[version_arg]
    components, _ = ARGS[components_arg]
    assert source in comment
    channel, quoted = quoted_toolchain(comment)
    assert version == channel
    assert components.split() == quoted
    assert set(quoted) == {"clippy", "rustfmt"}  # what both files list at the pinned commits


def test_rust_stages_install_the_declared_toolchains_and_components() -> None:
    rust = stage_text("rust-toolchain")
    assert STAGES["rust-toolchain"][0][1] == "rust:${RUST_VERSION}-slim-bookworm AS rust-toolchain"
    assert 'read -ra components <<<"${RUST_COMPONENTS}"' in rust
    assert 'rustup component add --toolchain "${RUST_VERSION}" "${components[@]}"' in rust
    ffi = stage_text("rust-ffi-toolchain")
    assert STAGES["rust-ffi-toolchain"][0][1] == "rust-toolchain AS rust-ffi-toolchain"
    assert 'read -ra components <<<"${FFI_RUST_COMPONENTS}"' in ffi
    assert 'rustup toolchain install "${FFI_RUST_VERSION}" --profile minimal' in ffi
    assert 'rustup component add --toolchain "${FFI_RUST_VERSION}" "${components[@]}"' in ffi
    # cuzk builds with cuzk's toolchain; curio (make deps: filecoin-ffi) gets both.
    assert "COPY --from=rust-toolchain /usr/local/rustup /usr/local/rustup" in stage_text("cuzk")
    assert "COPY --from=rust-ffi-toolchain /usr/local/rustup /usr/local/rustup" in stage_text(
        "curio"
    )


def test_nothing_is_tuned_to_the_build_machine() -> None:
    body = "\n".join(f"{word} {rest}" for word, rest, _ in INSTRUCTIONS)
    assert "march=native" not in body and "target-cpu=native" not in body
    assert re.fullmatch(r"[0-9a-f]{40}", ARGS["BLST_COMMIT"][0])
    assert "v0.3.16" in ARGS["BLST_COMMIT"][1]
    source = stage_text("source")
    assert 'https://github.com/supranational/blst.git "${BLST_COMMIT}"' in source
    assert 'rev-parse HEAD)" = "${BLST_COMMIT}"' in source
    # filecoin-ffi's release tag, so install-filcrypto fetches the portable prebuilt library
    assert "git -C extern/filecoin-ffi fetch" in source and "refs/tags/${tag}" in source
    cuzk = stage_text("cuzk")
    assert """default = ["portable"]""" in cuzk  # supraseal-c2 -> blst/portable
    assert "cargo build --release --locked" in cuzk
    assert "grep -q 'Compiling in portable mode' target/release/build/blst-*/output" in cuzk
    curio = stage_text("curio")
    assert 'CGO_CFLAGS="-O2 -g -D__BLST_PORTABLE__"' in curio  # the Go blst module
    assert "FFI_PORTABLE=1" in curio
    assert "RUN ./build.sh -D__BLST_PORTABLE__" in curio  # curio's libblst.a
    blst = [i for i, (w, r, _) in enumerate(STAGES["curio"]) if r.startswith("./build.sh")]
    deps = [i for i, (w, r, _) in enumerate(STAGES["curio"]) if "make deps" in r]
    assert blst and deps and blst[0] < deps[0]  # before build-blst.sh would clone its own


def test_host_requirements_are_declared_once_and_agree() -> None:
    final = STAGES[""]
    labels = " ".join(rest for word, rest, _ in final if word == "LABEL")
    env = " ".join(rest for word, rest, _ in final if word == "ENV")
    assert 'vastui.requires.cpu="x86-64-v3"' in labels
    assert 'vastui.requires.nvidia-driver=">=580"' in labels
    assert "VASTUI_REQUIRE_CPU=x86-64-v3" in env
    assert "VASTUI_REQUIRE_DRIVER=580" in env
    # x86-64-v3 because curio is built with GOAMD64=v3, and the build checks the binary says so
    assert "grep -q 'GOAMD64=v3$' /tmp/curio.buildinfo" in stage_text("curio")
    header = DOCKERFILE.read_text().split("\nARG ", 1)[0]
    assert "x86-64-v3" in header and "GOAMD64=v3" in header
    assert "driver >= 580" in header and "CUDA 13.x >= 580" in header
    # the stand-in's default host driver satisfies the requirement
    smi = NVIDIA_SMI.read_text()
    default = re.search(r'^DEFAULT_DRIVER = "(\d+)\.', smi, re.M)
    assert default and int(default.group(1)) >= 580


# ------------------------------------------------------------------ nvidia-smi driver_version


def smi(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(NVIDIA_SMI), *argv],
        env={"WORKER_ROOT": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )


def machine(root: Path, **profile: object) -> None:
    (root / ".sim").mkdir(parents=True, exist_ok=True)
    (root / ".sim" / "machine.json").write_text(json.dumps(profile))


def test_nvidia_smi_driver_version(tmp_path: Path) -> None:
    machine(tmp_path, num_gpus=2, driver_version="590.44.01")
    res = smi(tmp_path, "--query-gpu=driver_version", "--format=csv,noheader")
    assert (res.returncode, res.stdout, res.stderr) == (0, "590.44.01\n590.44.01\n", "")
    for fmt in ("csv,noheader", "csv,noheader,nounits"):
        res = smi(tmp_path, "--query-gpu=name,driver_version", f"--format={fmt}")
        assert res.stdout.splitlines() == ["NVIDIA GeForce RTX 4090, 590.44.01"] * 2
    res = smi(tmp_path, "--query-gpu=driver_version,index,memory.total", "--format=csv,noheader")
    assert res.stdout.splitlines() == ["590.44.01, 0, 24564 MiB", "590.44.01, 1, 24564 MiB"]
    res = smi(tmp_path, "--query-gpu=index,driver_version", "--format=csv")
    assert res.stdout.splitlines() == ["index, driver_version", "0, 590.44.01", "1, 590.44.01"]
    # the plain header, as the real tool prints it: the tool's version is the driver's
    top = smi(tmp_path).stdout.splitlines()
    assert top[1] == (
        "| NVIDIA-SMI 590.44.01              Driver Version: 590.44.01      "
        "CUDA Version: 13.1     |"
    )
    assert len(top[1]) == len(top[0]) == 91
    # -L does not show the driver
    assert smi(tmp_path, "-L").stdout.startswith("GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-")


def test_nvidia_smi_driver_version_default(tmp_path: Path) -> None:
    machine(tmp_path, gpu_name="H100")
    res = smi(tmp_path, "--query-gpu=driver_version", "--format=csv,noheader,nounits")
    assert res.stdout == "580.95.05\n"
    assert smi(tmp_path).stdout.splitlines()[1] == (
        "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      "
        "CUDA Version: 13.0     |"
    )
    machine(tmp_path, driver_version="570.124.06")
    assert "CUDA Version: 12.8 " in smi(tmp_path).stdout
    res = smi(tmp_path, "--query-gpu=driver_versions", "--format=csv,noheader")
    assert res.returncode == 2
    assert res.stderr == 'Field "driver_versions" is not a valid field to query.\n'
