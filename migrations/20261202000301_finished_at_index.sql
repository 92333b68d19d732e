-- no-transaction
-- Retention deletes failed and cancelled events by when they failed or were cancelled
-- (processed_at), oldest first, a batch per statement. Without this index every batch read all
-- failed and cancelled rows (outbox_event_failed_status_idx has no time) and sorted them. Like
-- the console's indexes it holds only those rows: an event enters it only when it fails or is
-- cancelled, so the dispatcher's common path never touches it. Built CONCURRENTLY (one
-- statement per file).
CREATE INDEX CONCURRENTLY IF NOT EXISTS outbox_event_finished_at_idx
    ON outbox_event (status, processed_at)
    WHERE status IN ('failed', 'cancelled');
