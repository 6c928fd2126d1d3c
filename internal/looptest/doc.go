// Package looptest checks, for the tests of oncekv's background loops (the
// outbox relay, the intent reconciler, the retention sweeper), what every
// such loop promises: it ends at once when its database begins refusing
// calls (kv.DB.Done), with kv.ErrClosed once it is closed, kv.ErrReadFailed
// after a read fault, and with kv.ErrSyncFailed at the pass whose commit's
// sync failed after its meta page was written; its pass callback has that
// error too.
package looptest
