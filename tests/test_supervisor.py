"""The supervisor's judgement, pure: made-up observations in, verdicts out. No engine, no files, no clock."""
import pytest

from orchestrator import contract
from orchestrator.backends import ReplicaState, Status
from orchestrator.jobspec import make_spec
from orchestrator.run.records import parse_event
from orchestrator.run.supervisor import (
    FINISH_GRACE,
    Decision,
    Memory,
    Observation,
    Verdict,
    Watch,
    blame_memory,
    decide,
    describe_exit,
    first_failure,
    retryable,
)

MiB = 2**20
NOW = 1_700_000_000.0


def spec(workers=3, **fields):
    fields = {"stall_timeout": 5, "startup_timeout": 5, **fields}
    return make_spec(workers=workers, dataset="synthetic", samples=6000, run_id="sup", **fields)


def rs(index, status=Status.RUNNING, exit_code=None, oom=False, finished_at=None, role="worker"):
    return ReplicaState(id=f"c{index}", name=f"orch-sup-{role}-{index}", run="sup", role=role, index=index,
                        status=status, exit_code=exit_code, oom_killed=oom, finished_at=finished_at)


def failed(index, code, oom=False, at=NOW):
    return rs(index, Status.FAILED, exit_code=code, oom=oom, finished_at=at)


def ev(index, kind, **fields):
    event = parse_event({"v": contract.CONTRACT_VERSION, "event": kind, "worker": index, "time": NOW, **fields})
    assert event is not None
    return (("worker", index), event)


def joined(*indexes):
    return tuple(ev(i, "start", stage="training") for i in indexes)


def finished(*indexes):
    return tuple(ev(i, "done", train_seconds=3.0, test_accuracy=0.9) for i in indexes)


def running(n=3):
    return tuple(rs(i) for i in range(n))


def obs(states, events=(), heartbeats=None, now=NOW, elapsed=1.0):
    return Observation(states=tuple(states), events=tuple(events), heartbeats=heartbeats or {}, now=now,
                       elapsed=elapsed)


# -- the restart policy ----------------------------------------------------------------------------------
@pytest.mark.parametrize("replica, expected", [
    (None, True),  # vanished
    (failed(0, 137), True),  # SIGKILL
    (failed(0, 143), True),  # SIGTERM
    (failed(0, 1), False),  # the program's own verdict
    (failed(0, 127), False),
    (failed(0, 128), False),
    (failed(0, 137, oom=True), False),  # would only happen again
    (rs(0, Status.FAILED, exit_code=None), False),  # the engine gave up on it, no code
])
def test_retryable_follows_the_exit_code_policy(replica, expected):
    assert retryable(replica) is expected


def test_first_failure_is_the_replica_that_ended_first():
    states = [failed(0, 1, at=NOW + 2), failed(2, 137, at=NOW + 1), rs(1)]
    assert first_failure(states).index == 2


def test_first_failure_without_an_end_time_comes_after_those_with_one_then_by_index():
    assert first_failure([failed(0, 1, at=None), failed(1, 1, at=NOW)]).index == 1
    assert first_failure([failed(2, 1, at=None), failed(1, 1, at=None)]).index == 1
    assert first_failure([failed(1, 1, at=NOW), failed(0, 1, at=NOW)]).index == 0


def test_first_failure_is_none_when_nothing_failed():
    assert first_failure([rs(0), rs(1, Status.SUCCEEDED, exit_code=0), rs(2, Status.PAUSED)]) is None
    assert first_failure([]) is None


@pytest.mark.parametrize("replica, text", [
    (failed(0, 3), "exited with code 3"),
    (failed(0, 137), "was killed by signal 9 (exit 137)"),
    (failed(0, 137, oom=True), "was killed for exceeding its memory limit (exit 137); raise --memory"),
])
def test_describe_exit(replica, text):
    assert describe_exit(replica) == text


# -- waiting ----------------------------------------------------------------------------------------------
def test_waits_while_the_replicas_start():
    d = decide(spec(), Watch(), obs([rs(0, Status.PENDING), rs(1), rs(2)], elapsed=4.9))
    assert d.verdict == Verdict.WAIT and not d.is_final


def test_decision_is_final_only_for_an_end():
    finals = {v for v in Verdict if Decision(v, Watch()).is_final}
    assert finals == {Verdict.SUCCEEDED, Verdict.FAILED, Verdict.TIMED_OUT}


def test_the_watch_remembers_stages_and_results_across_looks():
    s = spec()
    d1 = decide(s, Watch(), obs(running(), events=(ev(0, "start", stage="importing"), *joined(1))))
    assert d1.watch.stages == {("worker", 0): "importing", ("worker", 1): "training"}
    d2 = decide(s, d1.watch, obs(running(), events=(*joined(0), *finished(1))))
    assert d2.watch.stages[("worker", 0)] == "training" and d2.watch.done == {("worker", 1)}
    assert d2.verdict == Verdict.WAIT


# -- failures ---------------------------------------------------------------------------------------------
def test_program_exit_fails_without_a_restart_even_when_restarts_remain():
    bad = failed(1, 3)
    d = decide(spec(max_restarts=2), Watch(), obs([rs(0), bad, rs(2)]))
    assert d.verdict == Verdict.FAILED
    assert d.replica == ("worker", 1) and d.failed == bad and d.exit_code == 3 and d.retryable is False
    assert d.message == "worker-1 exited with code 3; the other workers were stopped"


def test_a_single_worker_has_no_others_to_stop():
    d = decide(spec(workers=1), Watch(), obs([failed(0, 2)]))
    assert d.message == "worker-0 exited with code 2"


def test_signal_kill_restarts_while_restarts_remain():
    states = [rs(0), failed(1, 137), rs(2)]
    d = decide(spec(max_restarts=2), Watch(), obs(states), restarts=1)
    assert d.verdict == Verdict.RESTART and d.retryable and d.exit_code == 137 and d.replica == ("worker", 1)
    assert d.message == "worker-1 was killed by signal 9 (exit 137); the other workers were stopped"


def test_signal_kill_fails_once_restarts_are_used_up():
    states = [rs(0), failed(1, 137), rs(2)]
    assert decide(spec(), Watch(), obs(states)).verdict == Verdict.FAILED  # max_restarts 0
    d = decide(spec(max_restarts=2), Watch(), obs(states), restarts=2)
    assert d.verdict == Verdict.FAILED and d.retryable  # retryable, but not retried


def test_oom_kill_is_never_restarted():
    d = decide(spec(max_restarts=3), Watch(), obs([failed(0, 137, oom=True), rs(1), rs(2)]))
    assert d.verdict == Verdict.FAILED and not d.retryable
    assert d.message == ("worker-0 was killed for exceeding its memory limit (exit 137); raise --memory; "
                         "the other workers were stopped")


def test_the_first_of_several_failures_is_the_cause():
    # worker-2 died first; worker-0 failed afterwards because its peer went away
    d = decide(spec(), Watch(), obs([failed(0, 1, at=NOW + 3), rs(1), failed(2, 137, at=NOW + 1)]))
    assert d.replica == ("worker", 2) and d.exit_code == 137


def test_a_failure_beside_a_paused_replica_blames_the_pause():
    d = decide(spec(), Watch(), obs([failed(0, 1), rs(1, Status.PAUSED), rs(2)]))
    assert d.verdict == Verdict.FAILED and d.replica == ("worker", 0)
    assert d.message == ("worker-1 stalled (its container is paused) and worker-0 exited with code 1 when the "
                         "all-reduce timed out; the other workers were stopped")


def test_a_failure_wins_over_a_vanished_replica():
    d = decide(spec(), Watch(), obs([failed(0, 3), rs(1)]))
    assert d.replica == ("worker", 0) and "exited with code 3" in d.message


@pytest.mark.parametrize("max_restarts, verdict", [(0, Verdict.FAILED), (1, Verdict.RESTART)])
def test_vanished_replica_is_named_and_retryable(max_restarts, verdict):
    d = decide(spec(max_restarts=max_restarts), Watch(), obs([rs(0), rs(1)], events=joined(0, 1, 2)))
    assert d.verdict == verdict and d.retryable and d.replica == ("worker", 2)
    assert d.failed is None and d.exit_code is None
    assert d.message == "worker-2 vanished (its container was removed from outside orch); the other workers were stopped"


def test_every_replica_vanished_names_the_first():
    d = decide(spec(), Watch(), obs([]))
    assert d.verdict == Verdict.FAILED and d.replica == ("worker", 0) and "worker-0 vanished" in d.message


# -- success ----------------------------------------------------------------------------------------------
def test_succeeds_when_every_replica_exited_zero():
    states = [rs(i, Status.SUCCEEDED, exit_code=0, finished_at=NOW) for i in range(3)]
    assert decide(spec(), Watch(), obs(states)).verdict == Verdict.SUCCEEDED


def test_one_replica_done_is_not_success():
    states = [rs(0, Status.SUCCEEDED, exit_code=0), rs(1), rs(2)]
    assert decide(spec(), Watch(), obs(states, events=joined(0, 1, 2))).verdict == Verdict.WAIT


def test_every_result_written_succeeds_after_the_finish_grace():
    s = spec()
    states = [rs(0, Status.SUCCEEDED, exit_code=0), rs(1), rs(2, Status.SUCCEEDED, exit_code=0)]
    hb = {("worker", i): NOW for i in range(3)}
    d = decide(s, Watch(), obs(states, events=joined(0, 1, 2) + finished(0, 1, 2), heartbeats=hb, elapsed=10.0))
    assert d.verdict == Verdict.WAIT and d.watch.done_at == 10.0
    d = decide(s, d.watch, obs(states, heartbeats=hb, now=NOW + 1, elapsed=10.0 + FINISH_GRACE))
    assert d.verdict == Verdict.WAIT and d.watch.done_at == 10.0  # the first moment is kept
    d = decide(s, d.watch, obs(states, heartbeats=hb, now=NOW + 2, elapsed=10.1 + FINISH_GRACE))
    assert d.verdict == Verdict.SUCCEEDED


# -- stalls -----------------------------------------------------------------------------------------------
def _joined_watch(s, at=NOW):
    d = decide(s, Watch(), obs(running(), events=joined(0, 1, 2), now=at))
    assert d.verdict == Verdict.WAIT and d.watch.joined_at == at
    return d.watch


def test_fresh_heartbeat_keeps_waiting_long_after_the_startup_timeout():
    s = spec()
    w = _joined_watch(s)
    hb = {("worker", 0): NOW + 98, ("worker", 1): NOW + 20, ("worker", 2): 0.0}  # any progress counts
    assert decide(s, w, obs(running(), heartbeats=hb, now=NOW + 100, elapsed=100)).verdict == Verdict.WAIT


def test_stall_without_heartbeats_is_measured_from_the_join():
    s = spec()
    w = _joined_watch(s)
    assert decide(s, w, obs(running(), now=NOW + 5, elapsed=6)).verdict == Verdict.WAIT
    d = decide(s, w, obs(running(), now=NOW + 5.5, elapsed=6.5))
    assert d.verdict == Verdict.FAILED and d.stalled and d.replica is None and d.retryable
    assert d.message == ("training stalled: no worker made progress for 5 s; a worker is stuck (see `orch logs`); "
                         "the other workers were stopped")


def test_stall_is_measured_from_the_last_heartbeat():
    s = spec()
    w = _joined_watch(s)
    hb = {("worker", i): NOW + 10 for i in range(3)}
    assert decide(s, w, obs(running(), heartbeats=hb, now=NOW + 15, elapsed=16)).verdict == Verdict.WAIT
    assert decide(s, w, obs(running(), heartbeats=hb, now=NOW + 15.1, elapsed=16)).verdict == Verdict.FAILED


def test_stall_with_a_paused_replica_names_it():
    s = spec()
    w = _joined_watch(s)
    d = decide(s, w, obs([rs(0), rs(1, Status.PAUSED), rs(2)], now=NOW + 6, elapsed=7))
    assert d.verdict == Verdict.FAILED and d.replica == ("worker", 1) and not d.stalled
    assert d.message == ("training stalled: no worker made progress for 5 s; worker-1's container is paused; "
                         "the other workers were stopped")


def test_stall_restarts_when_restarts_remain():
    s = spec(max_restarts=1)
    d = decide(s, _joined_watch(s), obs(running(), now=NOW + 6, elapsed=7))
    assert d.verdict == Verdict.RESTART and d.stalled


def test_no_stall_is_judged_before_every_replica_joined():
    s = spec(startup_timeout=300)
    d = decide(s, Watch(), obs(running(), events=joined(0, 1), now=NOW + 100, elapsed=100))
    assert d.verdict == Verdict.WAIT


# -- start-up ---------------------------------------------------------------------------------------------
def test_startup_timeout_names_the_replica_that_never_started():
    events = (*joined(0, 2), ev(1, "start", stage="importing"))
    s = spec()
    d = decide(s, Watch(), obs([rs(0), rs(1, Status.PENDING), rs(2)], events=events[:2], elapsed=5.0))
    assert d.verdict == Verdict.WAIT  # not past the timeout yet
    d = decide(s, d.watch, obs([rs(0), rs(1, Status.PENDING), rs(2)], elapsed=5.5))
    assert d.verdict == Verdict.TIMED_OUT and d.is_final and d.replica == ("worker", 1)
    assert d.message == ("worker-1 did not join the cluster within the startup timeout of 5 s; the other workers "
                         "were stopped; raise --startup-timeout if start-up is just slow here")


def test_startup_timeout_names_a_paused_replica_over_a_slow_one():
    # worker-1 was paused after it began importing; worker-2 is merely slow to connect
    events = (*joined(0), ev(1, "start", stage="importing"), ev(2, "start", stage="connecting"))
    d = decide(spec(), Watch(), obs([rs(0), rs(1, Status.PAUSED), rs(2)], events=events, elapsed=6))
    assert d.verdict == Verdict.TIMED_OUT and d.replica == ("worker", 1)
    assert d.message.startswith("worker-1 did not join")


def test_startup_timeout_names_every_slow_replica_when_all_started():
    events = (*joined(0), ev(1, "start", stage="connecting"), ev(2, "start", stage="importing"))
    d = decide(spec(), Watch(), obs(running(), events=events, elapsed=6))
    assert d.verdict == Verdict.TIMED_OUT and d.replica == ("worker", 1)
    assert d.message.startswith("worker-1, worker-2 did not join the cluster within the startup timeout of 5 s")


def test_startup_timeout_is_not_restarted():
    d = decide(spec(max_restarts=3), Watch(), obs([rs(0, Status.PENDING)] + [rs(1), rs(2)], elapsed=6))
    assert d.verdict == Verdict.TIMED_OUT


# -- memory -----------------------------------------------------------------------------------------------
def _stalled(max_restarts=0):
    s = spec(max_restarts=max_restarts)
    d = decide(s, _joined_watch(s), obs(running(), now=NOW + 6, elapsed=7))
    assert d.stalled
    return d


def _mem(working, limit, charged=None):
    return Memory(working, working if charged is None else charged, limit)


def test_blame_memory_names_a_replica_at_its_limit():
    d = blame_memory(_stalled(), {("worker", 0): _mem(100 * MiB, 2048 * MiB), ("worker", 2): _mem(250 * MiB, 256 * MiB)})
    assert d.replica == ("worker", 2) and not d.stalled and d.verdict == Verdict.FAILED and not d.retryable
    assert d.message == ("training stalled: no worker made progress for 5 s; worker-2 is using 250 MiB of its "
                         "256 MiB memory limit; raise --memory; the other workers were stopped")


def test_blame_memory_counts_90_percent_as_starved():
    d = _stalled()
    assert blame_memory(d, {("worker", 1): _mem(int(0.9 * 1000 * MiB), 1000 * MiB)}).replica == ("worker", 1)
    assert blame_memory(d, {("worker", 1): _mem(int(0.89 * 1000 * MiB), 1000 * MiB)}) == d


def test_blame_memory_counts_a_charge_pinned_at_the_limit_as_starved():
    """The kernel may count the re-read pages as inactive cache: the working set looks small, but the
    cgroup's charge stays at its limit."""
    d = _stalled()
    pinned = blame_memory(d, {("worker", 0): _mem(120 * MiB, 256 * MiB, charged=255 * MiB)})
    assert pinned.replica == ("worker", 0) and "worker-0 is using 255 MiB of its 256 MiB memory limit" in pinned.message
    assert blame_memory(d, {("worker", 0): _mem(120 * MiB, 1000 * MiB, charged=970 * MiB)}) == d


def test_blame_memory_names_the_first_of_several_starved_replicas():
    d = blame_memory(_stalled(), {("worker", 2): _mem(255 * MiB, 256 * MiB), ("worker", 1): _mem(250 * MiB, 256 * MiB)})
    assert d.replica == ("worker", 1)


def test_blame_memory_ignores_an_unknown_limit_and_no_samples():
    d = _stalled()
    assert blame_memory(d, {("worker", 0): _mem(100 * MiB, 0)}) == d
    assert blame_memory(d, {}) == d


def test_blame_memory_names_a_replica_that_never_joined_because_it_starved():
    """Under too small a limit the framework's import re-reads its libraries' pages for minutes: no kill, no join."""
    late = decide(spec(), Watch(), obs(running(), events=joined(0, 2), elapsed=6))
    assert late.verdict == Verdict.TIMED_OUT and late.stalled
    d = blame_memory(late, {("worker", 0): _mem(100 * MiB, 2048 * MiB), ("worker", 1): _mem(254 * MiB, 256 * MiB)})
    assert d.verdict == Verdict.FAILED and d.replica == ("worker", 1) and not d.retryable
    assert d.message == ("worker-1 did not join the cluster within the startup timeout of 5 s; the other workers "
                         "were stopped; worker-1 is using 254 MiB of its 256 MiB memory limit; raise --memory")
    assert blame_memory(late, {("worker", 1): _mem(100 * MiB, 2048 * MiB)}) == late  # merely slow
    # worker-0 joined: near its limit or not, it is not why worker-1 did not
    joined_starved = {("worker", 0): _mem(255 * MiB, 256 * MiB), ("worker", 1): _mem(100 * MiB, 2048 * MiB)}
    assert blame_memory(late, joined_starved) == late


def test_blame_memory_leaves_other_decisions_alone():
    starved = {("worker", 0): _mem(255 * MiB, 256 * MiB)}
    failure = decide(spec(), Watch(), obs([failed(0, 3), rs(1), rs(2)]))
    assert blame_memory(failure, starved) == failure
    waiting = decide(spec(), Watch(), obs(running()))
    assert blame_memory(waiting, starved) == waiting


def test_blame_memory_turns_a_restart_into_a_failure():
    # Like an out-of-memory kill, a starved worker would starve again after a restart.
    d = blame_memory(_stalled(max_restarts=1), {("worker", 0): _mem(255 * MiB, 256 * MiB)})
    assert d.verdict == Verdict.FAILED and not d.retryable and "worker-0 is using 255 MiB" in d.message


# -- ParameterServerStrategy: only the chief reports; the servers never exit ---------------------------------
def ps_states(chief=Status.RUNNING, chief_code=None, ps=Status.RUNNING, ps_code=None):
    return (rs(0, chief, exit_code=chief_code, role="chief"), rs(0, ps, exit_code=ps_code, role="ps",
                                                                 finished_at=NOW if ps_code else None),
            rs(0, role="worker"), rs(1, role="worker"))


def chief_event(kind, **fields):
    return (("chief", 0), parse_event({"v": contract.CONTRACT_VERSION, "event": kind, "worker": 0, "time": NOW,
                                       **fields}))


def test_ps_succeeds_when_the_chief_exits_while_the_servers_still_serve():
    s = spec(workers=2, strategy="ps")
    d = decide(s, Watch(), obs(ps_states(Status.SUCCEEDED, 0)))
    assert d.verdict == Verdict.SUCCEEDED


def test_ps_joins_and_stalls_on_the_chief_alone():
    s = spec(workers=2, strategy="ps")
    d = decide(s, Watch(), obs(ps_states(), events=(chief_event("start", stage="training"),)))
    assert d.verdict == Verdict.WAIT and d.watch.joined_at == NOW  # no event from the servers is awaited
    d = decide(s, d.watch, obs(ps_states(), heartbeats={("chief", 0): NOW}, now=NOW + 6, elapsed=7))
    assert d.verdict == Verdict.FAILED and "no worker made progress" in d.message


def test_ps_a_killed_parameter_server_restarts_the_group():
    s = spec(workers=2, strategy="ps", max_restarts=1)
    d = decide(s, Watch(), obs(ps_states(ps=Status.FAILED, ps_code=137)))
    assert d.verdict == Verdict.RESTART and d.replica == ("ps", 0) and "ps-0 was killed by signal 9" in d.message
