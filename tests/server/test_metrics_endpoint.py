"""`/metrics`: Prometheus text with live gauges per running run and GPU and server counters."""

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.support import ServerProcess
from tests.server.test_ingest_websocket import batch, hello, open_agent, send


def _samples(server: ServerProcess) -> dict[tuple[str, tuple], float]:
    response = httpx.get(f"{server.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_has_live_gauges_per_run_and_gpu_and_counters(server: ServerProcess) -> None:
    ws, welcome = open_agent(server, hello(name="bs256", project="cifar"))
    message = batch(1, 0, n=4)
    message["device"] = {
        "t": [1.7e9, 1.7e9],
        "gpu": [0, 1],
        "util": [88.0, 42.0],
        "mem_used": [1e9, 2e9],
        "mem_total": [8e9, 8e9],
    }
    send(ws, message)
    send(ws, batch(1, 0))  # a replay
    ws.send("{broken")
    ws.recv(timeout=10)
    run = (("project", "cifar"), ("run", "bs256"), ("run_id", str(welcome["run_id"])))
    samples = _samples(server)
    gpu1 = tuple(sorted((*run, ("gpu", "1"), ("rank", "0"))))
    assert samples[("stoker_gpu_utilization_percent", gpu1)] == 42.0
    assert samples[("stoker_gpu_memory_used_bytes", gpu1)] == 2e9
    assert samples[("stoker_run_step_time_seconds", run)] == 0.01
    assert abs(samples[("stoker_run_input_wait_share", run)] - 0.2) < 1e-9
    assert samples[("stoker_ingest_batches_total", ())] == 1
    assert samples[("stoker_ingest_replayed_batches_total", ())] == 1
    assert samples[("stoker_ingest_rows_total", (("section", "steps"),))] == 4
    assert samples[("stoker_ingest_rejects_total", (("reason", "invalid"),))] == 1
    assert samples[("stoker_agent_connections_open", ())] == 1
    assert samples[("stoker_agent_connections_total", ())] == 1
    send(ws, {"type": "end"})
    ws.close()
    after = _samples(server)
    assert ("stoker_run_step_time_seconds", run) not in after


def test_gpm_gauges_keep_the_last_closed_window_while_one_is_open(server: ServerProcess) -> None:
    """Windows lined up with long steps leave the GPM fields of the readings in between null:
    the gauge keeps the last closed window's SM/tensor/DRAM figures; a GPU without GPM has
    none (absent, not 0)."""
    ws, welcome = open_agent(server, hello(name="long-steps", project="gpm"))
    message = batch(1, 0, n=4)
    message["device"] = {
        "t": [1.7e9, 1.7e9, 1.7e9 + 1, 1.7e9 + 1],
        "gpu": [0, 1, 0, 1],
        "util": [97.0, 50.0, 98.0, 51.0],
        "sm_util": [31.0, None, None, None],  # GPU 0's window closed, then open again
        "tensor_util": [12.0, None, None, None],
        "dram_bw_util": [64.0, None, None, None],
    }
    send(ws, message)
    second = batch(2, 4, n=4)
    second["device"] = {"t": [1.7e9 + 2], "gpu": [0], "util": [99.0], "sm_util": [None]}
    send(ws, second)
    run = (("project", "gpm"), ("run", "long-steps"), ("run_id", str(welcome["run_id"])))
    gpu0 = tuple(sorted((*run, ("gpu", "0"), ("rank", "0"))))
    gpu1 = tuple(sorted((*run, ("gpu", "1"), ("rank", "0"))))
    samples = _samples(server)
    assert samples[("stoker_gpu_utilization_percent", gpu0)] == 99.0  # the latest reading
    assert samples[("stoker_gpu_sm_active_percent", gpu0)] == 31.0
    assert samples[("stoker_gpu_tensor_active_percent", gpu0)] == 12.0
    assert samples[("stoker_gpu_dram_bandwidth_percent", gpu0)] == 64.0
    assert ("stoker_gpu_sm_active_percent", gpu1) not in samples
    assert samples[("stoker_gpu_utilization_percent", gpu1)] == 51.0
    send(ws, {"type": "end"})
    ws.close()
