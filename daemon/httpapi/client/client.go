// Package client is a Go client of Loopsy's HTTP API as orchestrd (and
// Loopsy's own daemon) serves it: the CLI's peers and run --peer, the
// benchmarks, any Go program. It knows only the wire: JSON bodies, the
// Bearer key, Loopsy's error body and server-sent events.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client calls one node's API.
type Client struct {
	// Base is the API's base URL, "http://host:19532/api/v1".
	Base string
	// Key is the Bearer key presented.
	Key  string
	HTTP *http.Client
}

// New makes a client of base with key. insecure skips TLS verification
// (the daemon's own loopback API with a self-signed certificate).
func New(base, key string, insecure bool) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	if insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // our own daemon, trusted by its key
	}
	return &Client{Base: strings.TrimSuffix(base, "/"), Key: key, HTTP: &http.Client{Transport: tr}}
}

// Error is Loopsy's error body with the HTTP status it came with.
type Error struct {
	Status  int
	Code    int    `json:"code"`
	Message string `json:"message"`
	// RetryAfter is the Retry-After header of a 429, if any.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (HTTP %d, code %d)", e.Message, e.Status, e.Code)
}

func (c *Client) request(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encoding the request to %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, c.Base+path, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

func readError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb struct {
		Error *Error `json:"error"`
	}
	e := &Error{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	if json.Unmarshal(b, &eb) == nil && eb.Error != nil {
		e.Code, e.Message = eb.Error.Code, eb.Error.Message
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	if s := resp.Header.Get("Retry-After"); s != "" {
		var n int
		if _, err := fmt.Sscan(s, &n); err == nil {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	return e
}

// Do calls method path with body (nil: none) and decodes the answer into
// out (nil: discarded).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// Peer is Loopsy's PeerInfo.
type Peer struct {
	NodeID        string   `json:"nodeId"`
	Hostname      string   `json:"hostname"`
	Address       string   `json:"address"`
	Port          int      `json:"port"`
	Platform      string   `json:"platform"`
	Version       string   `json:"version"`
	Capabilities  []string `json:"capabilities"`
	Status        string   `json:"status"`
	LastSeen      int64    `json:"lastSeen"`
	FailureCount  int      `json:"failureCount"`
	Trusted       bool     `json:"trusted"`
	ManuallyAdded bool     `json:"manuallyAdded"`
	// Source (orchestrd only): manual, config, handshake or mdns, the
	// most trusted way the node learned of the peer.
	Source string `json:"source,omitempty"`
}

// Peers lists the node's known peers.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var out struct {
		Peers []Peer `json:"peers"`
	}
	err := c.Do(ctx, http.MethodGet, "/peers", nil, &out)
	return out.Peers, err
}

// AddPeer adds a peer by hand.
func (c *Client) AddPeer(ctx context.Context, address string, port int, nodeID string) (Peer, error) {
	var p Peer
	err := c.Do(ctx, http.MethodPost, "/peers", map[string]any{"address": address, "port": port, "nodeId": nodeID}, &p)
	return p, err
}

// RemovePeer forgets a peer.
func (c *Client) RemovePeer(ctx context.Context, nodeID string) error {
	return c.Do(ctx, http.MethodDelete, "/peers/"+url.PathEscape(nodeID), nil, nil)
}

// Exec is Loopsy's ExecuteParams.
type Exec struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Cwd     string            `json:"cwd,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Timeout int64             `json:"timeout,omitempty"` // ms; 0: the node's default
}

// Result is Loopsy's ExecuteResult.
type Result struct {
	JobID    string `json:"jobId"`
	ExitCode *int   `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	Duration int64  `json:"duration"`
	Killed   bool   `json:"killed"`
}

// Execute runs a command to its end.
func (c *Client) Execute(ctx context.Context, e Exec) (Result, error) {
	var r Result
	err := c.Do(ctx, http.MethodPost, "/execute", e, &r)
	return r, err
}

// Event is one server-sent event of a streamed execution: stdout and
// stderr chunks, dropped (Bytes the node could not hold for a slow
// reader), then exit (Data the exit code, or "null").
type Event struct {
	Type   string `json:"type"`
	Data   string `json:"data"`
	JobID  string `json:"jobId"`
	Killed bool   `json:"killed"`
	// TimedOut: killed at its timeout (orchestrd says so; Loopsy does not).
	TimedOut bool   `json:"timedOut"`
	Signal   string `json:"signal"`
	Error    string `json:"error"`
	Bytes    int64  `json:"bytes"`
}

// Stream runs a command and calls on for each event as it comes, the job's
// id known from the first (started is called with it as soon as the
// answer's headers arrive). It returns the exit event, or an error if the
// stream ended without one.
func (c *Client) Stream(ctx context.Context, e Exec, started func(jobID string), on func(Event)) (Event, error) {
	resp, err := c.request(ctx, http.MethodPost, "/execute/stream", e)
	if err != nil {
		return Event{}, err
	}
	defer resp.Body.Close()
	if id := resp.Header.Get("X-Loopsy-Job-Id"); id != "" && started != nil {
		started(id)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return Event{}, fmt.Errorf("a stream event that is not JSON: %w", err)
		}
		if ev.Type == "exit" {
			return ev, nil
		}
		if on != nil {
			on(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return Event{}, fmt.Errorf("reading the stream: %w", err)
	}
	return Event{}, errors.New("the stream ended without an exit event")
}

// Cancel cancels a running job.
func (c *Client) Cancel(ctx context.Context, jobID string) error {
	return c.Do(ctx, http.MethodDelete, "/execute/"+url.PathEscape(jobID), nil, nil)
}
