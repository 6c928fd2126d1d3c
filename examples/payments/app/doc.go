// Package app is the payments example service: orders created under an
// Idempotency-Key (in-transaction path, unique per tenant and external_ref),
// paid through a provider (external path: intent, downstream key,
// reconciler), with an order.paid outbox event in the same transaction as the
// status change. cmd/oncekv's demo and examples/payments both run it.
package app
