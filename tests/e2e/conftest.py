import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item so fixtures can tell that a test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"e2e_report_{report.when}", report)
