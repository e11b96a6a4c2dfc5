package dectris

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/stemdot/stemdot/errs"
)

// APIVersion is the SIMPLON API version of the paths used: /detector/api/1.8.0/...
const APIVersion = "1.8.0"

// Client speaks a DECTRIS detector control unit's SIMPLON REST API (DECTRIS SIMPLON API
// manual; LiberTEM-live's DEigerClient): a parameter is read by GET
// /<module>/api/1.8.0/config/<param>, which answers {"value": ...}, and set by PUT of
// {"value": ...}; a command is a PUT to /detector/api/1.8.0/command/<command>.
type Client struct {
	// Base is the API's address, "http://host:port".
	Base string
	HTTP *http.Client
}

// NewClient returns a client of the API at addr ("host", "host:port" or
// "http://host:port"; port 80 where none is given).
func NewClient(addr string) *Client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return &Client{Base: strings.TrimRight(addr, "/"), HTTP: &http.Client{Timeout: 30 * time.Second}}
}

func (c *Client) url(module, kind, name string) string {
	return fmt.Sprintf("%s/%s/api/%s/%s/%s", c.Base, module, APIVersion, kind, name)
}

// do sends a request and decodes a JSON answer into out (nil: the answer is dropped).
// Errors are errs.IO and name the URL.
func (c *Client) do(ctx context.Context, method, url string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return errs.New(errs.Argument, "SIMPLON %s %s: %w", method, url, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return errs.New(errs.Argument, "SIMPLON %s %s: %w", method, url, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return errs.New(errs.IO, "SIMPLON %s %s: %w (is the detector control unit's API at %s? option dectris_api)", method, url, err, c.Base)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return errs.New(errs.IO, "SIMPLON %s %s: %w", method, url, err)
	}
	if resp.StatusCode/100 != 2 {
		return errs.New(errs.IO, "SIMPLON %s %s: %s: %q", method, url, resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil || len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return errs.New(errs.Format, "SIMPLON %s %s: the answer %q is not the JSON expected: %w", method, url, truncate(b), err)
	}
	return nil
}

// truncate is b, cut to 200 bytes, for messages.
func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// Config reads the parameter param of module ("detector" or "stream") into value (a
// pointer).
func (c *Client) Config(ctx context.Context, module, param string, value any) error {
	var v struct {
		Value json.RawMessage `json:"value"`
	}
	url := c.url(module, "config", param)
	if err := c.do(ctx, http.MethodGet, url, nil, &v); err != nil {
		return err
	}
	if err := json.Unmarshal(v.Value, value); err != nil {
		return errs.New(errs.Format, "SIMPLON GET %s: value %q: %w", url, truncate(v.Value), err)
	}
	return nil
}

// SetConfig sets the parameter param of module to value.
func (c *Client) SetConfig(ctx context.Context, module, param string, value any) error {
	return c.do(ctx, http.MethodPut, c.url(module, "config", param), map[string]any{"value": value}, nil)
}

// Command sends a detector command ("arm", "trigger", "disarm", "abort"). Arm answers
// the series' number ("sequence id"), returned; the others return 0.
func (c *Client) Command(ctx context.Context, cmd string) (uint64, error) {
	var v struct {
		Seq *uint64 `json:"sequence id"`
	}
	if err := c.do(ctx, http.MethodPut, c.url("detector", "command", cmd), nil, &v); err != nil {
		return 0, err
	}
	if v.Seq == nil {
		if cmd == "arm" {
			return 0, errs.New(errs.Format, "SIMPLON arm at %s answered no \"sequence id\"", c.Base)
		}
		return 0, nil
	}
	return *v.Seq, nil
}
