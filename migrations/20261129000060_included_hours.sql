-- Compute hours a month includes (docs/metering.md, "Prices and cost"), as Azure ML's plans
-- had: exact decimal text, as the prices are; NULL for none.
ALTER TABLE plan_prices ADD COLUMN included_hours text;
