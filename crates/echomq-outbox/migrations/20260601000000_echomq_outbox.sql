-- echomq-outbox: the outbox table, its notification trigger (the README's
-- "Table layout" describes each column). Applied by Outbox::migrate
-- (sqlx's migrator); an application that keeps its own migrations may copy
-- this file into them instead.

CREATE TABLE echomq_outbox (
    -- Relay order (oldest first) and the row's handle for the relay's delete.
    id          bigserial   PRIMARY KEY,
    -- The echomq queue the job goes to.
    queue       text        NOT NULL,
    -- The job's id in echomq: the caller's, or a fresh UUID. Re-relaying a
    -- row enqueues the same id, which echomq answers as "existing".
    job_id      text        NOT NULL,
    payload     jsonb       NOT NULL,
    -- Everything else of the job's options (JobOptions, versioned by "v").
    options     jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- Postgres's clock at the insert: the backlog's age.
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- When the job is due (a delay counted from the insert, or the caller's
    -- run-at time); NULL for at once. The relay turns it into a delay
    -- against Postgres's clock, so Valkey's clock never has to agree.
    run_at      timestamptz,
    -- Relays that could not enqueue the row for a reason retrying cannot
    -- fix (an option echomq refuses) set these and leave it aside.
    attempts    integer     NOT NULL DEFAULT 0,
    last_error  text,
    failed_at   timestamptz
);

-- The relay's scan: waiting rows in id order, failed ones left out.
CREATE INDEX echomq_outbox_waiting ON echomq_outbox (id) WHERE failed_at IS NULL;

-- Wakes listening relays at commit (a notification is delivered only if
-- its transaction commits, once per channel and payload per transaction).
CREATE FUNCTION echomq_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('echomq_outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER echomq_outbox_notify
    AFTER INSERT ON echomq_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION echomq_outbox_notify();
