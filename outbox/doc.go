// Package outbox is the transactional outbox: events written in the same
// transaction as the business change that causes them, and a relay that
// publishes them, in commit order, after the commit.
//
// Publishing to a broker from inside a transaction is wrong both ways: an
// event sent before a commit that then fails announces a change that never
// happened; one sent after a commit is lost if the process dies in between.
// The outbox stores the event with the change; the relay sends it later:
//
//	ob := outbox.New(db)
//	err := db.Update(ctx, func(tx kv.Tx) error {
//		if err := markPaid(tx, orderID); err != nil {
//			return err
//		}
//		_, _, err := ob.AddTx(tx, outbox.Event{ID: "order.paid/" + orderID, Topic: "order.paid", Payload: body})
//		return err
//	})
//
//	relay, _ := outbox.NewRelay(ob, &outbox.RelayConfig{Publisher: &outbox.WebhookPublisher{URL: hook}})
//	go relay.Run(ctx, nil)
//
// # Order and delivery
//
// Events get a sequence number from the outbox bucket; bbolt has one writer,
// so sequence order is commit order, and the relay publishes in that order.
// On a store with several writers (etcd) commit order is the order of the
// revisions at which the events were committed, and the events of one
// commit go in the order they were added; finding the head of the queue
// there takes a read of the whole queue, which the relay does once a pass
// (not once a batch), and not at all while the head waits out its
// backoff; a reading keeps the queue's first 20,000 events, so the
// relay's memory is bounded whatever the backlog (a larger one is read
// again for each 20,000). The relay is woken by the commit of new events (through any
// handle New returned for the database) and polls only as a fallback
// (RelayConfig.PollInterval). An event is marked published only
// after the publisher acknowledged it, so a crash between the two publishes
// it again: delivery is at least once, and consumers dedupe on Event.ID
// (package inbox does). Adding an event whose ID is already stored (a retried
// business transaction) adds nothing.
//
// A failing event is retried with backoff, holding back the events after it
// to keep the order; after RelayConfig.MaxAttempts it moves to quarantine,
// where it stays — never dropped — until an operator requeues it (Requeue,
// or RequeueAll after a broker's outage quarantined many; oncekv outbox
// requeue, the admin console). Published events are kept for RelayConfig.Retention (1 hour
// by default) to dedupe late re-adds, then removed by retention.Sweep with
// RecordKind. The WebhookPublisher posts JSON and never follows redirects: a
// 3xx is a failed publish, not a success. A publisher's panic fails the
// event it was publishing, logged with its stack (see Publisher), so an
// event that makes the publisher panic is quarantined like any failing
// one rather than ending the process at every restart. Any other panic in
// a pass of Run (an observer's, say) is that pass's error, logged, and the
// next pass comes PollInterval later.
//
// # Caveats
//
//   - Run one relay per outbox: two would publish the same events twice as
//     often (still correct for deduping consumers, but wasteful).
//   - A quarantined event blocks nothing after it only once it is in
//     quarantine; until then, the events behind a failing one wait.
//   - Lag reports the oldest unpublished event's age; watch it.
//   - With kv.Options.Cipher set, payloads are sealed (package seal), bound
//     to the event's ID and sequence; IDs, topics, keys, headers and
//     publish errors stay clear. The relay never publishes an event whose
//     payload does not open: it stops at it and reports the error.
//   - A pending event damaged on disk (kv.ErrCorrupt: its checksum or its
//     encoding fails) can never be published; the relay passes over it as
//     it does a quarantined one, counts it in PassStats.Damaged, and goes
//     on with the events behind it. It stays in the queue (Lag.Damaged
//     counts it, apart from Pending) until DropDamaged removes it, and the
//     check names it.
package outbox
