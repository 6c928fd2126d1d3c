// Package inbox makes a message consumer effectively-once: it records the
// producer-assigned ID of every processed message in the same transaction
// as the state change the message causes, so a redelivery finds the ID and
// is acknowledged without being applied again.
//
// Brokers deliver at least once: a consumer that applied a message and
// crashed before its acknowledgement reached the broker gets the message
// again. With the inbox, applying and remembering are one commit:
//
//	in, _ := inbox.New(db, nil)
//	d, err := in.Handle(ctx, "billing", msg.ID, func(tx kv.Tx) error {
//		return applyCharge(tx, msg) // the consumer's own writes
//	})
//	if err == nil && d.Ack {
//		msg.Ack() // only after the commit; d.Duplicate says it was seen before
//	}
//
// On bbolt, a redelivery of a message already applied is answered from a
// read transaction, without a commit (about 1 µs instead of a durable
// commit's fsync), and an ID never seen costs no transaction before the one
// that applies it (the ID directory, see the README's "How records are
// kept"). On etcd, which has no directory, the write transaction finds
// duplicates, saving new messages a read round trip; its first attempt
// guesses a message's mark absent instead of reading it (etcdkv's
// "Guessing instead of reading"), so a new message costs one round trip,
// its commit, and a redelivery one, the mark's read.
//
// MarkTx does the same inside the caller's transaction; SeenTx and Seen
// answer whether an ID is remembered.
//
// # Retention
//
// An ID is remembered for Config.Retention (7 days by default), then forgotten
// (a lookup treats an expired ID as absent; retention.Sweep with RecordKind
// reclaims the space). The window must exceed the broker's redelivery
// horizon — how long after a first delivery the broker may deliver the same
// message again — or a very late redelivery is applied twice.
// retention.Policy.Validate checks it against Constraints.RedeliveryHorizon.
//
// # Caveats
//
//   - The function given to Handle may run more than once (group commit) and
//     must write only through its transaction.
//   - Acknowledge after Handle returns, never inside the function: an
//     acknowledgement sent before the commit loses the message if the commit
//     fails.
//   - Message IDs are the producer's: two producers that reuse IDs under one
//     consumer name collide. Use one consumer name per stream.
package inbox
