"""Where a result was computed: platform, devices, library versions, precision, CPU.

  from el_jax.infra import provenance
  info = provenance.ran_on()            # {"platform": "gpu", "device_kind": "NVIDIA H200", ...}
  provenance.describe(info)             # "gpu: 1 x NVIDIA H200 (jax 0.11.2, matmul default)"
  provenance.check_same_platform(old, info, what)   # WorkdirError when they differ

Every run records `ran_on()` (summary.json, seed_<s>/ran_on.json, grid rows, bench and
verify JSON), so a number on a page says where it came from, and a finished workdir from
one platform is never reported as another's (`el_jax.run.train.read_final`). The CPU model and
its instruction-set flags are part of it on every platform: XLA's CPU code and the matmul
libraries pick kernels by them, so CPU numbers (speed, and trained values in their last
digits) are specific to them (docs/testing.md).

Only the standard library at import; JAX is imported inside `ran_on`.
"""
import os
import platform as platform_lib
import re

from el_jax.infra import hostmem  # the standard library only

# The flags of /proc/cpuinfo that decide which kernels XLA's CPU backend and its matmul
# libraries use (vector width, FMA, bf16 / int8 dot instructions); the rest are noise here.
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
             "avx512dq", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_bf16", "amx_tile",
             "avx_vnni")


def _cpuinfo():
  """The first processor's block of /proc/cpuinfo as {key: value} ({} where there is none)."""
  fields = {}
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if not line.strip():
          if fields:
            break
          continue
        key, _, val = line.partition(":")
        fields.setdefault(key.strip(), val.strip())
  except OSError:
    pass
  return fields


def cpu_model():
  """(model name, the ISA_FLAGS this CPU has) from /proc/cpuinfo (platform.processor() else)."""
  info = _cpuinfo()
  flags = set(info.get("flags", "").split())
  return info.get("model name") or platform_lib.processor() or platform_lib.machine(), \
      [f for f in ISA_FLAGS if f in flags]


def cpu_id():
  """"<vendor> family F model M stepping S" from /proc/cpuinfo ("" where it has none): tells
  apart CPUs whose model name is the same (a guest's "AMD EPYC" is Zen 4 or Zen 5 by family)."""
  info = _cpuinfo()
  if "cpu family" not in info:
    return ""
  return (f"{info.get('vendor_id', '?')} family {info['cpu family']} model "
          f"{info.get('model', '?')} stepping {info.get('stepping', '?')}")


def _version(module_name):
  try:
    import importlib.metadata as md
    return md.version(module_name)
  except Exception:  # noqa: BLE001 -- not installed: recorded as absent
    return None


def ran_on(devices=None):
  """What this process computes on: a JSON-able dict.

  platform      "cpu" | "gpu" | "tpu" (JAX's platform of the devices)
  device_kind   e.g. "NVIDIA H200", "TPU v5 lite", "cpu"
  device_count  devices of every process; `process_count` processes
  jax, jaxlib, flax, optax   versions
  matmul_precision  `jax_default_matmul_precision` ("default" when unset: TF32 for float32
                on NVIDIA GPUs since Ampere, bf16 passes on TPU, full float32 on CPU)
  cpu, cpu_flags  the host CPU's model name and its ISA_FLAGS
  cpu_id        its vendor, family, model and stepping (`cpu_id`)
  xla_flags     $XLA_FLAGS ("" when unset)
  malloc        the host malloc settings of el_jax.infra.hostmem ("default": glibc's own)
  """
  import jax
  devs = list(devices) if devices is not None else jax.devices()
  cpu, flags = cpu_model()
  return {
      "platform": devs[0].platform,
      "device_kind": devs[0].device_kind,
      "device_count": len(devs),
      "process_count": jax.process_count(),
      "jax": jax.__version__,
      "jaxlib": _version("jaxlib"),
      "flax": _version("flax"),
      "optax": _version("optax"),
      "matmul_precision": str(jax.config.jax_default_matmul_precision or "default"),
      "cpu": cpu,
      "cpu_flags": flags,
      "cpu_id": cpu_id(),
      "xla_flags": os.environ.get("XLA_FLAGS", ""),
      "malloc": hostmem.state()["malloc"],
  }


def describe(info):
  """One line for tables and messages: "gpu: 1 x NVIDIA H200 (jax 0.11.2, matmul default)";
  on CPU the CPU model stands for the device, with its family and model numbers where
  recorded (one brand name covers several generations: an AMD EPYC of family 25 is a Zen 3 or
  4, of family 26 a Zen 5): "cpu: AMD EPYC (avx512f; family 25 model 17) (jax 0.10.2, ...)"."""
  if not info:
    return "unrecorded"
  if info.get("platform") == "cpu":
    wide = "avx512f" if "avx512f" in info.get("cpu_flags", ()) else (
        "avx2" if "avx2" in info.get("cpu_flags", ()) else "no avx2")
    ident = re.search(r"family \d+ model \d+", info.get("cpu_id") or "")
    dev = f"{info.get('cpu') or 'cpu'} ({wide}{'; ' + ident.group(0) if ident else ''})"
  else:
    dev = f"{info.get('device_count', '?')} x {info.get('device_kind', '?')}"
  return (f"{info.get('platform', '?')}: {dev} (jax {info.get('jax', '?')}, matmul "
          f"{info.get('matmul_precision', 'default')})")


def same_platform(a, b):
  """True if two `ran_on` records are of the same platform and device kind (an unrecorded
  one, from before el_jax recorded it, counts as the CPU it was always computed on)."""
  a = a or {"platform": "cpu", "device_kind": "cpu"}
  b = b or {"platform": "cpu", "device_kind": "cpu"}
  return (a.get("platform"), a.get("device_kind")) == (b.get("platform"), b.get("device_kind"))
