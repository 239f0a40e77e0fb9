-- The part of curio's cluster database that its workers and vastui use, as curio's own
-- migrations create it (filecoin-project/curio @ e0294b0f, harmony/harmonydb/sql/<file>; later
-- ALTERs folded in, each named where it lands). Written here from those files: table and column
-- names, types, defaults and the foreign keys' ON DELETE are theirs.
-- yb_servers() is YugabyteDB's own function (the smart driver's LB_QUERY,
-- yugabyte/pgx load_balance.go); vastsim/curio_schema.py fills in its rows.

-- 20230719-harmony.sql:3-10; 20250111-machine-maintenance.sql:1 (unschedulable, the cordon);
-- 20250818-restart-request.sql:1 (restart_request)
CREATE TABLE IF NOT EXISTS harmony_machines (
    id SERIAL PRIMARY KEY NOT NULL,
    last_contact TIMESTAMP NOT NULL DEFAULT current_timestamp,
    host_and_port varchar(300) NOT NULL,
    cpu INTEGER NOT NULL,
    ram BIGINT NOT NULL,
    gpu FLOAT NOT NULL,
    unschedulable BOOLEAN DEFAULT FALSE,
    restart_request TIMESTAMP WITH TIME ZONE
);
CREATE INDEX IF NOT EXISTS idx_harmony_machines_unschedulable ON harmony_machines (unschedulable);

-- 20230719-harmony.sql:12-25 (owner_id ... ON DELETE SET NULL: a machine's row deleted frees
-- its tasks); 20240927-task-retrywait.sql:1 (retries)
CREATE TABLE IF NOT EXISTS harmony_task (
    id SERIAL PRIMARY KEY NOT NULL,
    initiated_by INTEGER,
    update_time TIMESTAMP NOT NULL DEFAULT current_timestamp,
    posted_time TIMESTAMP NOT NULL,
    owner_id INTEGER REFERENCES harmony_machines (id) ON DELETE SET NULL,
    added_by INTEGER NOT NULL,
    previous_task INTEGER,
    name varchar(16) NOT NULL,
    retries BIGINT NOT NULL DEFAULT 0
);

-- 20230719-harmony.sql:31-40; 20231113-harmony_taskhistory_oops.sql:1
-- (completed_by_host_and_port); 20240501-harmony-indexes.sql; 20260430-harmony-task-history-idx.sql
CREATE TABLE IF NOT EXISTS harmony_task_history (
    id SERIAL PRIMARY KEY NOT NULL,
    task_id INTEGER NOT NULL,
    name VARCHAR(16) NOT NULL,
    posted TIMESTAMP NOT NULL,
    work_start TIMESTAMP NOT NULL,
    work_end TIMESTAMP NOT NULL,
    result BOOLEAN NOT NULL,
    err varchar,
    completed_by_host_and_port varchar(300) NOT NULL
);
CREATE INDEX IF NOT EXISTS harmony_task_history_task_id_result_index
    ON harmony_task_history (task_id, result);
CREATE INDEX IF NOT EXISTS harmony_task_history_recent_task_result_idx
    ON harmony_task_history (work_end DESC, name ASC, task_id ASC, result ASC);

-- 20240404-machine_detail.sql; 20240527-machine_name.sql (machine_name);
-- 20260501-machine-detail-version.sql (version)
CREATE TABLE IF NOT EXISTS harmony_machine_details (
    id SERIAL PRIMARY KEY,
    tasks TEXT,
    layers TEXT,
    startup_time TIMESTAMP,
    miners TEXT,
    machine_id INTEGER,
    machine_name TEXT,
    version TEXT,
    FOREIGN KEY (machine_id) REFERENCES harmony_machines(id) ON DELETE CASCADE
);
CREATE UNIQUE INDEX IF NOT EXISTS machine_details_machine_id ON harmony_machine_details(machine_id);

-- 20230919-config.sql; 20250926-harmony_config_timestamp.sql (timestamp)
CREATE TABLE IF NOT EXISTS harmony_config (
    id SERIAL PRIMARY KEY NOT NULL,
    title VARCHAR(300) UNIQUE NOT NULL,
    config TEXT NOT NULL,
    timestamp TIMESTAMP NOT NULL DEFAULT NOW()
);

-- 20250115-proofshare.sql:3-20; 20250620-proofshare-pow.sql:1 (was_pow);
-- 20250619-proofshare-fixes.sql (the unique request_cid)
CREATE TABLE IF NOT EXISTS proofshare_queue (
    service_id BIGINT NOT NULL,
    obtained_at TIMESTAMP WITH TIME ZONE NOT NULL,
    request_cid TEXT NOT NULL,
    response_data BYTEA,
    compute_task_id BIGINT,
    compute_done BOOLEAN NOT NULL DEFAULT FALSE,
    submit_task_id BIGINT,
    submit_done BOOLEAN NOT NULL DEFAULT FALSE,
    was_pow BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (service_id, obtained_at)
);
CREATE UNIQUE INDEX IF NOT EXISTS proofshare_queue_request_cid_uindex
    ON proofshare_queue (request_cid);

-- 20250115-proofshare.sql:27-40; 20250724-proofshare-autosettle.sql:1 (autosettle)
CREATE TABLE IF NOT EXISTS proofshare_meta (
    singleton BOOLEAN NOT NULL DEFAULT TRUE CHECK (singleton = TRUE) UNIQUE,
    enabled BOOLEAN NOT NULL DEFAULT FALSE,
    wallet TEXT,
    pprice TEXT NOT NULL DEFAULT '0',
    request_task_id BIGINT,
    autosettle BOOLEAN NOT NULL DEFAULT TRUE,
    PRIMARY KEY (singleton)
);
INSERT INTO proofshare_meta (singleton, enabled, wallet) VALUES (TRUE, FALSE, NULL)
    ON CONFLICT DO NOTHING;

-- 20250115-proofshare.sql:47-57
CREATE TABLE IF NOT EXISTS proofshare_provider_payments (
    provider_id BIGINT NOT NULL,
    request_cid TEXT NOT NULL,
    payment_nonce BIGINT NOT NULL,
    payment_cumulative_amount TEXT NOT NULL,
    payment_signature BYTEA NOT NULL,
    created_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (provider_id, payment_nonce)
);
CREATE INDEX IF NOT EXISTS proofshare_provider_payments_request_cid_index
    ON proofshare_provider_payments (request_cid);
