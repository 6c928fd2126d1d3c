// Package testlog is a log for tests of code that logs from goroutines of
// its own (a server's handlers, a reconciler's workers, a relay): the code
// writes it through a *slog.Logger while the test reads what was written.
//
//	logger, logs := testlog.New()
//	relay, _ := outbox.NewRelay(o, &outbox.RelayConfig{Publisher: p, Logger: logger})
//	...
//	require.Contains(t, logs.String(), `level=ERROR msg="outbox publisher panicked`)
//
// Lines are slog's text format, so a test matches the message and the
// attributes it relies on as they are printed.
package testlog
