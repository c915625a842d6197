from kai.common.times import rfc3339


def test_rfc3339_is_utc_to_the_second():
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1767225600.9) == "2026-01-01T00:00:00Z"


def test_rfc3339_defaults_to_now():
    assert rfc3339().endswith("Z") and len(rfc3339()) == len("1970-01-01T00:00:00Z")
