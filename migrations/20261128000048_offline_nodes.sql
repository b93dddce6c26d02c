-- Azure's rule for a node whose scheduling is disabled: it is `offline` where it would be `idle`
-- (nothing runs on it), and `idle` again once scheduling is enabled. One trigger keeps the rule
-- for every statement that moves a node's state or its scheduling: disabling an idle node, the
-- end of a disabled node's last task, a disabled node's restart, enabling an offline node. Its
-- WHEN keeps it off every other row (the dispatcher's placements and ends of enabled nodes).
CREATE FUNCTION nodes_offline_when_disabled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.state := CASE WHEN NEW.scheduling_disabled THEN 'offline' ELSE 'idle' END;
    IF TG_OP = 'UPDATE' AND OLD.state IS DISTINCT FROM NEW.state THEN
        NEW.state_transition_time := now();
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER nodes_offline_when_disabled BEFORE UPDATE OF state, scheduling_disabled ON nodes
    FOR EACH ROW
    WHEN ((NEW.state = 'idle' AND NEW.scheduling_disabled) OR (NEW.state = 'offline' AND NOT NEW.scheduling_disabled))
    EXECUTE FUNCTION nodes_offline_when_disabled();
