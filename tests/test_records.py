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


# -- numbers from a container are range-checked before any arithmetic -------------------------------------
HUGE = 10**400  # a JSON integer of 401 digits: Python reads it whole, float() of it overflows


@pytest.mark.parametrize("field, value", [
    ("epoch", HUGE), ("epochs", HUGE), ("samples", HUGE), ("samples", -1), ("steps_per_epoch", HUGE),
    ("seconds", HUGE), ("seconds", -1.0), ("seconds", 1e300), ("compute_seconds", 1e300), ("loss", 1e300),
    ("loss", float("inf")), ("loss", float("nan")), ("accuracy", HUGE), ("accuracy", -0.5), ("accuracy", 101.0),
    ("val_accuracy", 1e300), ("time", 1e300), ("time", -1.0), ("worker", HUGE),
])
def test_an_event_with_a_number_out_of_range_is_refused_in_one_line(field, value):
    from orchestrator.run.records import Refused, event_of

    raw = {"v": V, "event": "epoch", "worker": 0, "time": 5.0, "epoch": 1, "samples": 100, field: value}
    if field == "steps_per_epoch":
        raw = {"v": V, "event": "start", "worker": 0, "stage": "training", field: value}
    assert parse_event(raw) is None
    with pytest.raises(Refused) as caught:
        event_of(raw, "an event of worker-0")
    reason = str(caught.value)
    assert reason.startswith("an event of worker-0 is refused: ") and field in reason
    assert "\n" not in reason and len(reason) < 300


@pytest.mark.parametrize("figures", [
    {"samples_per_epoch": [HUGE]}, {"train_samples": HUGE}, {"global_batch": -1}, {"train_seconds": 1e300},
    {"epochs": [{"epoch": HUGE}]}, {"epochs": [{"loss": 1e300}]}, {"epochs": [{"samples": -HUGE}]},
    {"epochs": [{f"k{i}": 1 for i in range(1000)}]}, {"epochs": [{"x" * 1000: 1}]}, {"num_workers": HUGE},
    {"resumed_from_epoch": HUGE},
])
def test_a_result_with_a_number_out_of_range_is_refused_in_one_line(figures):
    from orchestrator.run.records import Refused, result_of

    raw = {"v": V, "worker": 0, "train_seconds": 1.0, "test_accuracy": 0.5, **figures}
    assert parse_result(raw) is None
    with pytest.raises(Refused) as caught:
        result_of(raw, "the result of worker-0")
    assert str(caught.value).startswith("the result of worker-0 is refused: ") and "\n" not in str(caught.value)


def test_numbers_within_range_still_parse():
    epoch = parse_event({"v": V, "event": "epoch", "worker": 3, "time": 1.8e9, "epoch": 10**6, "epochs": 10**6,
                         "samples": 10**12, "seconds": 10**6, "loss": -1e12, "accuracy": 1.0, "val_accuracy": 0.0,
                         "val_loss": 1e12})
    assert epoch is not None and epoch.samples == 10**12
    assert parse_event({"v": V, "event": "epoch", "worker": 0, "epoch": 1, "accuracy": 75.0}) is not None  # percent
    result = parse_result({"v": V, "worker": 0, "samples_per_epoch": [10**12] * 3, "train_seconds": 0.0,
                           "epochs": [{"epoch": 1, "loss": 0.5, "seconds": 2, "samples": 100, "val_loss": None}]})
    assert result is not None and result.epochs[0]["epoch"] == 1
