"""A sweep trial's Tune results as the driver's MLflow logger reads them
(fco_ray.sweep.logging.result_rows): the rows of the group's members and those that ended."""
import json
import math

from fco_ray.sweep.logging import result_rows


def test_rows_travel_as_member_row_pairs_with_nan_kept():
    result = {"members": [[0, {"round": 5, "f1": 0.5}], [2, {"round": 5, "f1": float("nan")}]],
              "ended": [1]}
    rows, ended = result_rows(result)
    assert list(rows) == [0, 2] and rows[0] == {"round": 5, "f1": 0.5} and math.isnan(rows[2]["f1"])
    assert ended == [1]


def test_a_result_checkpointed_as_json_text_before_still_replays():
    old = {"members": json.dumps({"0": {"round": 5, "f1": 0.5}, "3": {"round": 5, "f1": 1.0}}),
           "ended": json.dumps([1, 2])}
    rows, ended = result_rows(old)
    assert rows == {0: {"round": 5, "f1": 0.5}, 3: {"round": 5, "f1": 1.0}} and ended == [1, 2]
