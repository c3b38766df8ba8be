"""Every kiosk's heard-truth history in the venue's PostgreSQL: the queue in the kiosk's own
database (`outbox`), the venue's tables (`central`) and the thread between them (`worker`)."""
