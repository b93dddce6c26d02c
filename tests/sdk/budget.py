"""A used-up budget that stops growth, as a script on the official Azure Batch SDK sees it: the
resize is accepted, and the pool ends steady at its size with a BudgetExceeded resize error, as
Azure shows a quota that stopped a resize. Shrinking is still allowed.

BATCHPOOL_POOL names a pool of one idle node whose account's budget is used up.
"""

import os

import azure.batch

from waiting import wait

URL = os.environ["BATCHPOOL_URL"]
ACCOUNT = os.environ["BATCHPOOL_ACCOUNT"]
KEY = os.environ["BATCHPOOL_KEY"]
POOL = os.environ["BATCHPOOL_POOL"]
VERSION = azure.batch.__version__ if hasattr(azure.batch, "__version__") else azure.batch.VERSION
MAJOR = int(VERSION.split(".")[0])


def check_held(pool):
    assert pool.current_dedicated_nodes == 1 and pool.target_dedicated_nodes == 2, pool
    errors = pool.resize_errors or []
    assert [e.code for e in errors] == ["BudgetExceeded"], errors
    assert "budget" in errors[0].message, errors[0].message
    # 15.x names the list error_values (a model is a mapping there: .values is its method).
    values = errors[0].error_values if MAJOR >= 15 else errors[0].values
    assert [v.name for v in values] == ["Budget", "AtLimit"], values


def run_15():
    from azure.core.credentials import AzureNamedKeyCredential
    from azure.batch import BatchClient, models

    c = BatchClient(endpoint=URL, credential=AzureNamedKeyCredential(ACCOUNT, KEY))
    c.begin_resize_pool(POOL, models.BatchPoolResizeOptions(target_dedicated_nodes=2), polling_interval=0.2).result()
    pool = wait("a steady pool", lambda: (p := c.get_pool(POOL)).allocation_state == models.AllocationState.STEADY and p)
    check_held(pool)
    c.begin_resize_pool(POOL, models.BatchPoolResizeOptions(target_dedicated_nodes=0), polling_interval=0.2).result()
    wait("no nodes", lambda: c.get_pool(POOL).current_dedicated_nodes == 0)
    assert not c.get_pool(POOL).resize_errors


def run_14():
    import azure.batch.models as m
    from azure.batch import BatchServiceClient
    from azure.batch.batch_auth import SharedKeyCredentials

    c = BatchServiceClient(SharedKeyCredentials(ACCOUNT, KEY), batch_url=URL)
    c.pool.resize(POOL, m.PoolResizeParameter(target_dedicated_nodes=2))
    pool = wait("a steady pool", lambda: (p := c.pool.get(POOL)).allocation_state == m.AllocationState.steady and p)
    check_held(pool)
    c.pool.resize(POOL, m.PoolResizeParameter(target_dedicated_nodes=0))
    wait("no nodes", lambda: (p := c.pool.get(POOL)).allocation_state == m.AllocationState.steady
         and p.current_dedicated_nodes == 0)
    assert not c.pool.get(POOL).resize_errors


if __name__ == "__main__":
    (run_15 if MAJOR >= 15 else run_14)()
    print(f"azure-batch {VERSION}: budget flow passed")
