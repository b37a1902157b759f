"""The Ray executor from a driver's point of view: the executor contract every executor passes
(``loopwise.core.execute.conformance``), plus what is Ray's own: a killed worker's job is retried,
printed output comes back, CPU jobs run as tasks, and kernel evaluations give what the local
executor gives."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from loopwise.core.execute import Job, LocalExecutor, RayExecutor, make_executor
from loopwise.core.execute._ray import gpu_actor_threads
from loopwise.core.execute.conformance import ExecutorConformance
from loopwise.errors import UserError

H = "executor_handlers"
HERE = Path(__file__).parent
CASES = HERE.parents[1] / "kernels" / "judge_cases"


@pytest.fixture(scope="module")
def cluster():
    """One local cluster for the whole file, started the way a user would start their own:
    no GPUs (the same on every machine), spare CPUs for tasks, the test handlers importable."""
    ray.init(num_cpus=4, num_gpus=0, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}})
    yield
    ray.shutdown()


class TestRayExecutor(ExecutorConformance):
    @pytest.fixture(autouse=True)
    def _cluster(self, cluster):
        yield

    def make_executor(self, devices, job_timeout_s):
        return RayExecutor(devices, job_timeout_s=job_timeout_s)

    def wait_ready(self, executor):
        ray.get([slot.starting for slot in executor._slots], timeout=60)

    def test_the_executor_leaves_a_cluster_it_did_not_start_up(self, two):
        two.submit(Job("a", f"{H}:echo", {"value": 1}))
        assert [r.ok for r in two.results(timeout=60)] == [True]
        two.close()
        assert ray.is_initialized()


def test_killed_worker_job_is_retried_then_given_up(cluster, tmp_path):
    with RayExecutor(["cpu", "cpu"], job_timeout_s=30, max_retries=2) as ex:
        ex.submit(Job("flaky", f"{H}:die_once", {"marker": str(tmp_path / "died"), "value": 5}))
        ex.submit(Job("doomed", f"{H}:die", {}))
        by_id = {r.job_id: r for r in ex.results(timeout=90)}
        flaky, doomed = by_id["flaky"], by_id["doomed"]
        assert flaky.ok and flaky.result["value"] == 5 and flaky.attempts == 2
        assert not doomed.ok and doomed.attempts == 3
        assert "worker died after 3 attempts" in doomed.error
        ex.submit(Job("after", f"{H}:echo", {"value": 1}))
        assert [r.result["value"] for r in ex.results(timeout=30)] == [1]


def test_printed_output_comes_back_in_the_log(cluster, tmp_path):
    with RayExecutor(["cpu"], job_timeout_s=30, log_dir=str(tmp_path)) as ex:
        ex.submit(Job("short", f"{H}:chatty", {}))
        ex.submit(Job("long", f"{H}:chatty", {"repeat": 30_000}))
        by_id = {r.job_id: r for r in ex.results(timeout=30)}
    short, long = by_id["short"], by_id["long"]
    for text in ("hello from stdout", "warning on stderr", "from a child process", "END"):
        assert text in short.log
    assert len(long.log) == 20_000 and long.log.rstrip().endswith("xEND")  # the tail is kept
    assert "hello from stdout" in (tmp_path / "long.log").read_text()  # the file has all of it


def test_cpu_jobs_run_as_tasks_not_on_the_actors(cluster):
    with RayExecutor(["cpu", "cpu"], job_timeout_s=30) as ex:
        for i in range(2):
            ex.submit(Job(f"gpu{i}", f"{H}:echo", {"value": i}))
        for i in range(3):
            ex.submit(Job(f"cpu{i}", f"{H}:echo", {"value": i}, needs="cpu"))
        results = list(ex.results(timeout=60))
    actors = [r for r in results if r.job_id.startswith("gpu")]
    tasks = [r for r in results if r.job_id.startswith("cpu")]
    assert len(tasks) == 3 and all(r.ok for r in results)
    assert all(r.worker.startswith("ray-worker-") for r in actors)
    assert all(r.worker.startswith("ray-task:cpu") for r in tasks)
    assert not {r.result["pid"] for r in tasks} & {r.result["pid"] for r in actors}


def test_hung_cpu_task_times_out(cluster):
    with RayExecutor(["cpu"], job_timeout_s=1.0) as ex:
        ex.submit(Job("hang", f"{H}:sleep", {"seconds": 30}, needs="cpu"))
        (r,) = list(ex.results(timeout=30))
    assert not r.ok and "job exceeded 1s" in r.error and r.worker.startswith("ray-task:cpu")


@pytest.mark.slow
def test_kernel_evaluations_match_the_local_executor(cluster):
    problem = (CASES / "problem_matmul_relu.py").read_text()
    cfg = {"static_check": False, "require_custom_kernel": False, "perf_trials": 3, "seed": 1, "energy": False}
    jobs = [Job(name, "loopwise.kernels.evaluate.worker_jobs:evaluate",
                {"problem_source": problem, "problem_name": "matmul_relu", "device": "cpu", "config": cfg,
                 "candidate_source": (CASES / f"{name}.py").read_text(), "candidate_name": name})
            for name in ("ok_torch", "wrong_scale", "segfault")]
    statuses = []
    for ex in (LocalExecutor(["cpu", "cpu"], job_timeout_s=120), RayExecutor(["cpu", "cpu"], job_timeout_s=120)):
        with ex:
            for job in jobs:
                ex.submit(job)
            statuses.append({r.job_id: r.result["status"] for r in ex.results(timeout=240)})
    assert statuses[0] == statuses[1] == {"ok_torch": "correct", "wrong_scale": "wrong_output", "segfault": "crash"}


def test_no_gpu_in_the_cluster_is_a_clear_error(cluster):
    with pytest.raises(UserError, match="no GPUs"):
        RayExecutor()


def test_without_ray_installed_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UserError, match=r"pip install 'loopwise\[ray\]'"):
        RayExecutor(["cpu"])


def test_make_executor_names_the_kind_and_rejects_mistakes():
    with pytest.raises(UserError, match="unknown executor 'nope'"):
        make_executor("nope")
    with pytest.raises(UserError, match="only applies to the 'ray' executor"):
        make_executor("local", ray_address="auto")
    import torch

    gpus = torch.cuda.device_count()
    with make_executor("local") as ex:  # by default: one worker per GPU, or one CPU worker
        assert isinstance(ex, LocalExecutor)
        assert ex.workers == ([f"worker-{i}:{i}" for i in range(gpus)] if gpus else ["worker-0:cpu"])


SCRIPT = """
import json, ray
from loopwise.core.execute import Job, RayExecutor
from loopwise.errors import UserError
out = {}
try:
    RayExecutor(["cpu"], address="127.0.0.1:1")
except UserError as exc:
    out["unreachable"] = str(exc)
with RayExecutor(["cpu"], job_timeout_s=60) as ex:
    out["started"] = ray.is_initialized()
    ex.submit(Job("a", "executor_handlers:echo", {"value": 7}))
    out["values"] = [r.result["value"] for r in ex.results(timeout=60)]
out["after_close"] = ray.is_initialized()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_script_gets_its_own_cluster_and_a_clear_error_for_a_bad_address():
    """In a fresh process, as a user's script: no cluster running, so the executor starts one
    (and shuts it down on close); an address nobody answers at is one clear line."""
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["unreachable"].startswith("cannot connect to the Ray cluster at '127.0.0.1:1'")
    assert "\n" not in out["unreachable"]
    assert out == {"unreachable": out["unreachable"], "started": True, "values": [7], "after_close": False}


GPU_THREADS_SCRIPT = """
import json, ray
from loopwise.core.execute import Job, RayExecutor
# a cluster that says it has two GPUs and six CPUs (Ray takes the count as given; the job touches no GPU)
ray.init(address="local", num_cpus=6, num_gpus=2, include_dashboard=False, log_to_driver=False)  # a new one, always
with RayExecutor(["gpu"], job_timeout_s=60) as ex:
    ex.submit(Job("a", "executor_handlers:echo", {"value": 1}))
    (result,) = ex.results(timeout=90)
print(json.dumps(result.result))
"""


def test_gpu_actor_threads_share_the_cpus_among_the_gpus():
    assert gpu_actor_threads({"CPU": 16.0, "GPU": 1.0}) == 16
    assert gpu_actor_threads({"CPU": 64.0, "GPU": 8.0}) == 8
    assert gpu_actor_threads({"CPU": 2.0, "GPU": 4.0}) == 1
    assert gpu_actor_threads({"CPU": 4.0}) == 4


@pytest.mark.slow
def test_a_gpu_actor_gets_its_share_of_the_host_threads_not_ray_s_one():
    """Ray sets OMP_NUM_THREADS=1 in an actor that asks for no CPU, so a GPU job's host work (the
    judge's draws and copies of a multi-GiB problem) would run on one thread: the GPU actors get
    the cluster's CPUs shared among its GPUs."""
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", GPU_THREADS_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=150, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["omp_threads"] == "3"


CLUSTER_SCRIPT = r"""
import json, os, subprocess, sys, threading, time
import ray
from ray._private.utils import publish_error_to_driver
from ray.cluster_utils import Cluster
from loopwise.core.execute import Job, RayExecutor

marker, problem, runs = sys.argv[1:4]
# a cluster of its own, as `ray start --head` and `ray start --address` on two more hosts would
# make it: a head without CPUs for jobs, two nodes of two CPUs each
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
nodes = [cluster.add_node(num_cpus=2) for _ in range(2)]
cluster.wait_for_nodes()
out = {}
try:
    # node loss: the node running the job goes away mid-job, without warning
    with RayExecutor(["cpu"], address=cluster.address, job_timeout_s=120, max_retries=2) as ex:
        ex.submit(Job("long", "executor_handlers:node_sleep", {"seconds": 6, "marker": marker}))
        results, started = [], time.monotonic()
        while not os.path.exists(os.path.join(marker, "attempt-1")) and time.monotonic() - started < 90:
            results += list(ex.results(timeout=1))
        first = open(os.path.join(marker, "attempt-1")).read()
        (lost,) = [n for n in nodes if n.node_id == first]
        cluster.remove_node(lost, allow_graceful=False)
        results += list(ex.results(timeout=120))
    out["first"], out["nodes"] = first, [n.node_id for n in nodes]
    out["results"] = [[r.job_id, r.ok, r.attempts, (r.result or {}).get("node"), r.error] for r in results]
    # the command line against that existing cluster (one node left), as --ray-address gives it,
    # while the cluster tells every driver of an error (as it does when a node is marked dead)
    ray.init(address=cluster.address, log_to_driver=False)
    cli = subprocess.Popen([sys.executable, "-m", "loopwise", "kernels", "optimize", problem, "--budget", "2",
                            "--executor", "ray", "--ray-address", cluster.address, "--workers", "cpu,cpu",
                            "--device", "cpu", "--runs-dir", runs, "--set", "kernels.eval.perf_trials=3", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = [], []
    readers = [threading.Thread(target=lambda s=s, o=o: o.append(s.read())) for s, o in ((cli.stdout, stdout), (cli.stderr, stderr))]
    for r in readers:
        r.start()
    deadline = time.monotonic() + 600
    while cli.poll() is None:
        if time.monotonic() > deadline:
            cli.kill()
        publish_error_to_driver("loopwise_test", "a cluster event for every driver", ray._private.worker.global_worker.gcs_client)
        time.sleep(0.5)
    for r in readers:
        r.join()
    out["cli"] = [cli.returncode, stdout[0], stderr[0]]
    ray.shutdown()
finally:
    cluster.shutdown()
print(json.dumps(out))
"""


@pytest.mark.slow  # a three-node cluster on this host and a search on it, about a minute
def test_an_existing_multi_node_cluster_survives_losing_a_node(tmp_path):
    """On a cluster of several nodes (simulated on this host with Ray's own Cluster helper): the node
    running a job dies without warning, the job runs again on another node and comes back; then
    `kernels optimize --ray-address` searches on that cluster, one node fewer, to the end."""
    marker = tmp_path / "marker"
    marker.mkdir()
    problem = HERE.parents[1] / "kernels" / "expert_problems" / "chain.py"
    env = {**os.environ, "PYTHONPATH": str(HERE), "TRITON_INTERPRET": "1", "LOOPWISE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", CLUSTER_SCRIPT, str(marker), str(problem), str(tmp_path / "runs")],
                          capture_output=True, text=True, env=env, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    (job,) = out["results"]
    other = [n for n in out["nodes"] if n != out["first"]]
    assert job[:3] == ["long", True, 2] and job[3] in other, job  # retried, on the node that is left
    code, stdout, stderr = out["cli"]
    assert code == 0, stderr
    assert stdout.startswith("{"), (stdout[:1500], stderr)
    summary = json.loads(stdout)
    assert summary["evaluations"] == 2 and summary["best"]["status"] == "correct"
    assert "on RayExecutor, 2 worker(s)" in stderr
    assert "a cluster event for every driver" in stderr  # Ray's message came, and went to stderr


def test_ray_cluster_messages_go_to_stderr_once_wrapped():
    """What Ray's driver prints about the cluster is marked for stderr (Ray's own printer picks the
    stream), whatever it was, and connecting twice does not wrap the printer twice."""
    from types import SimpleNamespace

    from loopwise.core.execute._ray import _cluster_messages_to_stderr

    seen = []
    worker = SimpleNamespace(print_to_stdstream=lambda data, ignore_prefix: seen.append((data, ignore_prefix)))
    fake = SimpleNamespace(_private=SimpleNamespace(worker=worker))
    original = worker.print_to_stdstream
    put_back = _cluster_messages_to_stderr(fake)
    wrapped = worker.print_to_stdstream
    _cluster_messages_to_stderr(fake)()  # a second wrap is none, and undoing it undoes nothing
    assert worker.print_to_stdstream is wrapped and wrapped is not original
    worker.print_to_stdstream({"lines": ["node marked dead"], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    assert seen == [({"lines": ["node marked dead"], "pid": "raylet", "is_err": True}, False)]
    put_back()  # at the shutdown of the connection loopwise made: Ray prints as it did
    assert worker.print_to_stdstream is original
    _cluster_messages_to_stderr(SimpleNamespace())()  # a Ray without the printer: left alone
