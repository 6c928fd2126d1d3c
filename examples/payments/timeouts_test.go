package main

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client that sends its headers a byte at a time (slowloris) once held a
// connection for a minute and more (issue 13, item 15). The server now cuts
// it after its read-header timeout; the 30 s guard only keeps a broken
// server from hanging the test.
func TestSlowClientIsCut(t *testing.T) {
	t.Parallel()
	svc, _, _ := service(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(svc.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/orders HTTP/1.1\r\nHost: x\r\n")
	require.NoError(t, err)
	guard := time.Now().Add(30 * time.Second)
	buf := make([]byte, 512)
	var readErr error
	for readErr == nil {
		require.True(t, time.Now().Before(guard), "the slow connection was never cut")
		// Keep trickling a header byte now and then, as slowloris does.
		_, _ = io.WriteString(conn, "X")
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, readErr = conn.Read(buf)
		if ne, ok := readErr.(net.Error); ok && ne.Timeout() {
			readErr = nil // nothing yet: trickle on
		}
	}
	// Closed (EOF) or reset: either way the server let go.
	require.True(t, errors.Is(readErr, io.EOF) || errors.Is(readErr, syscall.ECONNRESET), "%v", readErr)

	require.Equal(t, readHeaderTimeout, newServer(nil).ReadHeaderTimeout)
	s := newServer(nil)
	require.Positive(t, s.ReadTimeout)
	require.Positive(t, s.WriteTimeout)
	require.Positive(t, s.IdleTimeout)
}
