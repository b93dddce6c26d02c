-- Monthly budgets (docs/metering.md, "Budgets"), set by the operator: of a billing plan's pools,
-- or (billing_plan NULL) of all the account's pools, in the installation's currency. The leader
-- reckons each month's cost so far every few seconds (used_amount, for /metrics and the lists)
-- and notes the month in which 80% and 100% were first crossed, so each is logged once.
CREATE TABLE budgets (
    account text NOT NULL,
    billing_plan text,
    monthly_amount text NOT NULL,
    at_limit text NOT NULL CHECK (at_limit IN ('none', 'stopGrowth', 'drain')),
    warned_month date,
    exceeded_month date,
    used_amount double precision,
    evaluated_at timestamptz,
    UNIQUE NULLS NOT DISTINCT (account, billing_plan)
);
