-- Prices of compute hours (docs/metering.md, "Prices and cost"), set by the operator per account
-- and billing plan ('' for pools billed to no plan). Each change is a new row, in force from its
-- effective_from until the next: hours keep the price they were metered at. Amounts are exact
-- decimal text (at most 9 decimals), so no figure is rounded before it is summed.
CREATE TABLE plan_prices (
    pk bigserial PRIMARY KEY,
    account text NOT NULL,
    plan text NOT NULL,
    effective_from timestamptz NOT NULL,
    currency text NOT NULL,
    compute_hour text NOT NULL,
    low_priority_hour text,
    vm_sizes jsonb NOT NULL DEFAULT '{}',
    UNIQUE (account, plan, effective_from)
);
