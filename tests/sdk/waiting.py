"""What the SDK scripts share: waiting for a condition, as a script against Azure Batch would."""

import time


def wait(what, check, timeout=120):
    """Polls `check` until it returns something true, and returns that; fails after `timeout` s."""
    deadline = time.time() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
