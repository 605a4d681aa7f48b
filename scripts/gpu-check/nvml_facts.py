"""Raw NVML readings of every GPU, each call wrapped: what the real library answers."""

import json

import pynvml as n


def tryc(f, *a):
    try:
        v = f(*a)
        if isinstance(v, bytes):
            v = v.decode()
        return v
    except Exception as e:
        return f"ERROR {type(e).__name__}: {e}"


def obj(v):
    if hasattr(v, "_fields_"):
        return {k: obj(getattr(v, k)) for k, _ in v._fields_}
    if isinstance(v, bytes):
        return v.decode(errors="replace")
    if isinstance(v, (list, tuple)):
        return [obj(x) for x in v]
    if hasattr(v, "__len__") and not isinstance(v, str) and hasattr(v, "__getitem__"):
        try:
            return [obj(x) for x in v]
        except Exception:
            return str(v)
    return v if isinstance(v, (int, float, str, type(None), bool, dict)) else str(v)


n.nvmlInit()
out = {
    "driver": tryc(n.nvmlSystemGetDriverVersion),
    "nvml": tryc(n.nvmlSystemGetNVMLVersion),
    "cuda_driver": tryc(n.nvmlSystemGetCudaDriverVersion_v2),
    "count": n.nvmlDeviceGetCount(),
    "devices": [],
}
for i in range(out["count"]):
    h = n.nvmlDeviceGetHandleByIndex(i)
    d = {"index": i}
    for name, f in [
        ("name", n.nvmlDeviceGetName),
        ("uuid", n.nvmlDeviceGetUUID),
        ("serial", n.nvmlDeviceGetSerial),
        ("minor", n.nvmlDeviceGetMinorNumber),
        ("board_id", n.nvmlDeviceGetBoardId),
        ("multi_gpu_board", n.nvmlDeviceGetMultiGpuBoard),
        ("brand", n.nvmlDeviceGetBrand),
        ("arch", n.nvmlDeviceGetArchitecture),
        ("cc", n.nvmlDeviceGetCudaComputeCapability),
        ("numa_node", getattr(n, "nvmlDeviceGetNumaNodeId", None)),
        ("mig_mode", n.nvmlDeviceGetMigMode),
        ("max_mig", n.nvmlDeviceGetMaxMigDeviceCount),
        ("persistence", n.nvmlDeviceGetPersistenceMode),
        ("compute_mode", n.nvmlDeviceGetComputeMode),
        ("ecc", n.nvmlDeviceGetEccMode),
        ("power_mw", n.nvmlDeviceGetPowerUsage),
        ("power_limit_mw", n.nvmlDeviceGetEnforcedPowerLimit),
        ("temp_c", lambda h: n.nvmlDeviceGetTemperature(h, 0)),
        ("supported_events", n.nvmlDeviceGetSupportedEventTypes),
    ]:
        d[name] = obj(tryc(f, h)) if f else "absent in this pynvml"
    d["memory"] = obj(tryc(n.nvmlDeviceGetMemoryInfo, h))
    d["pci"] = obj(
        tryc(
            n.nvmlDeviceGetPciInfo_v3
            if hasattr(n, "nvmlDeviceGetPciInfo_v3")
            else n.nvmlDeviceGetPciInfo,
            h,
        )
    )
    d["utilization"] = obj(tryc(n.nvmlDeviceGetUtilizationRates, h))
    d["fabric"] = (
        obj(
            tryc(getattr(n, "nvmlDeviceGetGpuFabricInfoV", None) or n.nvmlDeviceGetGpuFabricInfo, h)
        )
        if hasattr(n, "nvmlDeviceGetGpuFabricInfo")
        else "absent"
    )
    links = {}
    for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
        s = tryc(n.nvmlDeviceGetNvLinkState, h, link)
        if not (isinstance(s, str) and "NotSupported" in s and link > 0):
            links[link] = s
    d["nvlink_state"] = links
    d["gpm_supported"] = obj(tryc(getattr(n, "nvmlGpmQueryDeviceSupport", lambda h: "absent"), h))
    try:
        profiles = []
        for p in range(0, 16):
            info = tryc(n.nvmlDeviceGetGpuInstanceProfileInfo, h, p)
            if not isinstance(info, str):
                profiles.append(obj(info))
        d["mig_gpu_instance_profiles"] = profiles
    except Exception as e:
        d["mig_gpu_instance_profiles"] = str(e)
    out["devices"].append(d)
n.nvmlShutdown()
print(json.dumps(out, indent=1, default=str))
