// Command consumer runs the whole messaging flow on one machine, with a
// real NATS JetStream server embedded in the process: a producer writes
// orders and their order.created events in one transaction (transactional
// outbox); the relay publishes them to JetStream with Nats-Msg-Id = event
// ID; a consumer applies each message to its own database with the inbox in
// the same transaction and acknowledges after the commit. Some
// acknowledgements are dropped on purpose, so the broker redelivers; the
// inbox makes every order count once.
//
//	go run ./examples/consumer -orders 200 -drop-ack 0.2
package main
