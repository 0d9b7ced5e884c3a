"""The contract's records as the host reads them: validated, versioned, refused when foreign."""
import pytest

from orchestrator import contract
from orchestrator.errors import ContractMismatch
from orchestrator.run.records import DoneEvent, EpochEvent, parse_event, parse_result

V = contract.CONTRACT_VERSION


def test_every_event_kind_parses_into_its_model():
    epoch = parse_event({"v": V, "event": "epoch", "worker": 1, "time": 5.0, "epoch": 2, "loss": 0.3, "samples": 100,
                         "newer_figure": 1})
    assert isinstance(epoch, EpochEvent) and epoch.epoch == 2 and epoch.samples == 100
    done = parse_event({"v": V, "event": "done", "worker": 0, "time": 1, "train_seconds": 2.5, "test_accuracy": 0.9})
    assert isinstance(done, DoneEvent)
    assert parse_event({"v": V, "event": "start", "worker": 0, "stage": "training"}).stage == "training"
    assert parse_event({"v": V, "event": "error", "worker": 0, "message": "boom"}).message == "boom"
    assert parse_event({"v": V, "event": "resumed", "worker": 0, "epoch": 3}).epoch == 3


@pytest.mark.parametrize("raw", [
    None, [], "text", {"v": V}, {"v": V, "event": "nope", "worker": 0},
    {"v": V, "event": "epoch", "worker": -1, "epoch": 1}, {"v": V, "event": "epoch", "worker": 0, "epoch": "x"},
    {"v": V, "event": "start", "worker": 0, "stage": "dancing"},
])
def test_malformed_events_are_dropped(raw):
    assert parse_event(raw) is None


def test_another_contract_version_is_refused_with_what_to_do():
    with pytest.raises(ContractMismatch, match="rebuild the images with `orch build`"):
        parse_event({"v": V + 1, "event": "epoch", "worker": 0, "epoch": 1}, "an event of worker-0")
    with pytest.raises(ContractMismatch, match="contract version None"):
        parse_result({"worker": 0})


def test_result_parses_and_rejects_bad_figures():
    result = parse_result({"v": V, "worker": 2, "train_seconds": 1.5, "test_accuracy": 0.93, "samples_per_epoch": [10, 10]})
    assert result.worker == 2 and result.samples_per_epoch == [10, 10]
    assert parse_result({"v": V, "worker": 0, "samples_per_epoch": "many"}) is None
