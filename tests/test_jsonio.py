"""A malformed JSON file is one error naming the file, what is wrong and where, in plain words, for every
reader: a workload (graphs.jsonio) and a device file."""

import pytest

from graphs.errors import InputError
from graphs.jsonio import read_json


@pytest.mark.parametrize("text, expected", [
    ('{"a": "xyz', "Unterminated string starting at line 1, column 7"),  # json's message ends in "at"
    ('{"a": 1 "b": 2}', "Expecting ',' delimiter at line 1, column 9"),
])
def test_a_syntax_error_says_where(tmp_path, text, expected):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        read_json(path)
    assert str(e.value) == f"{path}: not valid JSON: {expected}"


def test_device_files_say_it_alike(tmp_path):
    from graphs.devices import read_device_file

    path = tmp_path / "bad.json"
    path.write_text('{"a": "xyz')
    with pytest.raises(InputError, match="not a valid JSON device file: Unterminated string starting at "
                                         "line 1, column 7"):
        read_device_file(str(path))
