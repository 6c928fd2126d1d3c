package httpprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/oncekv/oncekv/sideeffect"
)

// Client is the payments service's side of the provider API: a
// sideeffect.Provider that charges with the intent's downstream key as
// Idempotency-Key and asks for status by key.
type Client struct {
	BaseURL string
	HTTP    *http.Client
}

var _ sideeffect.Provider = (*Client)(nil)

// Do sends POST /v1/charges. 2xx is success (the body is the result); a 4xx
// is a definite failure, except the statuses that say "not now" (408, 409,
// 425, 429: see Transient), which like 5xx and no answer are unknown.
func (c *Client) Do(ctx context.Context, call sideeffect.Call) (sideeffect.Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/v1/charges", bytes.NewReader(call.Payload))
	if err != nil {
		return sideeffect.Report{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", call.DownstreamKey)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return sideeffect.Report{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return sideeffect.Report{}, err
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return sideeffect.Report{State: sideeffect.Succeeded, Result: compact(body)}, nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && !Transient(resp.StatusCode):
		return sideeffect.Report{State: sideeffect.Failed, Reason: fmt.Sprintf("provider answered %d: %s", resp.StatusCode, excerpt(body))}, nil
	}
	return sideeffect.Report{}, fmt.Errorf("provider answered %d: %s", resp.StatusCode, excerpt(body))
}

// Transient reports the 4xx statuses that are not a decline but "try again
// later": 408 Request Timeout, 409 Conflict (the key is being processed),
// 425 Too Early and 429 Too Many Requests. Treating them as a definite
// failure would decline a payment the provider may still make.
func Transient(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return false
}

// excerpt bounds provider text kept in an intent's last error.
func excerpt(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 256 {
		return string(b[:256]) + "..."
	}
	return string(b)
}

// Status sends GET /v1/charges/{key}: 200 succeeded, 404 not found.
func (c *Client) Status(ctx context.Context, call sideeffect.Call) (sideeffect.Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/v1/charges/"+url.PathEscape(call.DownstreamKey), nil)
	if err != nil {
		return sideeffect.Report{}, err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return sideeffect.Report{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return sideeffect.Report{}, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return sideeffect.Report{State: sideeffect.Succeeded, Result: compact(body)}, nil
	case http.StatusNotFound:
		return sideeffect.Report{State: sideeffect.NotFound}, nil
	}
	return sideeffect.Report{}, fmt.Errorf("provider status answered %d", resp.StatusCode)
}

func compact(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return bytes.TrimSpace(b)
	}
	return out.Bytes()
}
