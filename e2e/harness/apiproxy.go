package harness

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// APIProxy is a TLS proxy of the test between an ownerguard and the real
// API server: it serves a certificate of the cluster CA for its address,
// so that a client configured in-cluster (or by a kubeconfig) takes it
// for the API server, and passes every request on with the client's own
// credentials. On watch streams whose answer is JSON (one event per
// line), a test can drop chosen events (Filter), hold a stream back
// (Freeze; Hold), end streams abruptly (Cut), and make the API server
// unreachable (SetUnreachable: every connection stalls, new ones too).
type APIProxy struct {
	Addr      string // host:port it listens on
	upstream  *url.URL
	transport *http.Transport
	server    *http.Server
	listener  net.Listener

	mu        sync.Mutex
	cond      *sync.Cond
	filter    func(WatchEvent) Verdict
	frozen    func(*WatchStream) bool
	streams   []*WatchStream // every stream, in order, ended ones too
	reachable chan struct{}  // closed while the API server is reachable
	requests  map[string]int // non-watch requests, by "METHOD path"
	closed    chan struct{}
}

// Verdict is what becomes of one watch event.
type Verdict int

const (
	// Pass the event on.
	Pass Verdict = iota
	// Drop it: the client never sees it; the stream goes on.
	Drop
	// Hold it and everything after it on its stream until Thaw.
	Hold
)

// WatchStream is one watch request the proxy passes on.
type WatchStream struct {
	ID        int
	Proto     string     // HTTP/1.1, HTTP/2.0
	Path      string     // /api/v1/pods
	Resource  string     // pods
	Namespace string     // empty for all namespaces
	Query     url.Values // fieldSelector, labelSelector, resourceVersion...
	Started   time.Time
	Passed    atomic.Int64
	Dropped   atomic.Int64
	lastPass  atomic.Int64 // unix nanoseconds of the last event passed on
	ended     atomic.Bool

	// Guarded by the proxy's mutex.
	queue []queued
	done  bool // the upstream stream ended
	held  bool // a Hold verdict stopped it
	cut   bool
}

type queued struct {
	line    []byte
	decided bool // held by a Hold verdict: passes once thawed
}

// FieldSelector of the stream's request.
func (s *WatchStream) FieldSelector() string { return s.Query.Get("fieldSelector") }

// LastPassed is when the stream last passed an event on (zero: never).
func (s *WatchStream) LastPassed() time.Time {
	if n := s.lastPass.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Live: the stream is still open.
func (s *WatchStream) Live() bool { return !s.ended.Load() }

func (s *WatchStream) String() string {
	return fmt.Sprintf("#%d %s %s?fieldSelector=%s (%d passed, %d dropped)", s.ID, s.Proto, s.Path, s.FieldSelector(), s.Passed.Load(), s.Dropped.Load())
}

// WatchEvent is one event of a watch stream, as the proxy read it.
type WatchEvent struct {
	Stream          *WatchStream
	Type            string // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	Kind            string
	Namespace, Name string
	ResourceVersion string
	Deleting        bool // metadata.deletionTimestamp is set
	Raw             []byte
}

// StartAPIProxy listens on listen (an IP:port) with a serving certificate
// of ca for that IP, and passes requests on to upstream (https://…),
// verified against ca.
func StartAPIProxy(listen, upstream string, ca *CA) (*APIProxy, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil, fmt.Errorf("proxy address %s: not an IP", listen)
	}
	certPEM, keyPEM, err := ca.Serving("e2e-api-proxy", nil, []net.IP{ip})
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	up, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	p := &APIProxy{
		upstream:  up,
		transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 32},
		reachable: make(chan struct{}),
		requests:  map[string]int{},
		closed:    make(chan struct{}),
	}
	close(p.reachable)
	p.cond = sync.NewCond(&p.mu)
	raw, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p.Addr = raw.Addr().String()
	p.listener = tls.NewListener(&gatedListener{Listener: raw, p: p},
		&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}})
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = p.server.Serve(p.listener) }()
	return p, nil
}

// Close stops the proxy: every stream and connection ends.
func (p *APIProxy) Close() {
	p.mu.Lock()
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.server.Close()
	p.transport.CloseIdleConnections()
}

// SetFilter decides every watch event from now on (nil: pass them all).
func (p *APIProxy) SetFilter(f func(WatchEvent) Verdict) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.filter = f
	p.cond.Broadcast()
}

// Freeze holds back every event of the streams match selects, those
// opened later included, until Thaw; the connection stays open and says
// nothing.
func (p *APIProxy) Freeze(match func(*WatchStream) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = match
	p.cond.Broadcast()
}

// Thaw releases what Freeze and Hold verdicts held, in order.
func (p *APIProxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = nil
	for _, s := range p.streams {
		s.held = false
	}
	p.cond.Broadcast()
}

// Cut ends the live streams match selects at once, as a connection that
// breaks: no more bytes, no end of the chunked body. It returns how many.
func (p *APIProxy) Cut(match func(*WatchStream) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.streams {
		if s.Live() && !s.cut && match(s) {
			s.cut = true
			n++
		}
	}
	p.cond.Broadcast()
	return n
}

// SetUnreachable makes the API server unreachable through the proxy (a
// network partition: every connection stalls in both directions, new
// ones never finish their handshake), or reachable again (what stalled
// goes on).
func (p *APIProxy) SetUnreachable(unreachable bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	isOpen := true
	select {
	case <-p.reachable:
	default:
		isOpen = false
	}
	switch {
	case unreachable && isOpen:
		p.reachable = make(chan struct{})
	case !unreachable && !isOpen:
		close(p.reachable)
	}
}

// Streams are the watch streams so far (live and ended) that match
// selects, oldest first.
func (p *APIProxy) Streams(match func(*WatchStream) bool) []*WatchStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*WatchStream
	for _, s := range p.streams {
		if match == nil || match(s) {
			out = append(out, s)
		}
	}
	return out
}

// Requests counts the non-watch requests whose "METHOD path" starts with prefix.
func (p *APIProxy) Requests(prefix string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for k, v := range p.requests {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// PodsWatch selects the watch streams of pods (every namespace or one),
// with fieldSelector (empty: none, the watch of every pod).
func PodsWatch(fieldSelector string) func(*WatchStream) bool {
	return func(s *WatchStream) bool { return s.Resource == "pods" && s.FieldSelector() == fieldSelector }
}

// AnyPodsWatch selects every watch stream of pods.
func AnyPodsWatch(s *WatchStream) bool { return s.Resource == "pods" }

func (p *APIProxy) waitReachable() {
	p.mu.Lock()
	ch := p.reachable
	p.mu.Unlock()
	select {
	case <-ch:
	case <-p.closed:
	}
}

// Hop-by-hop headers, which a proxy does not pass on (RFC 9110 7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *APIProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host = p.upstream.Scheme, p.upstream.Host
	out.Host = p.upstream.Host
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	watch := isWatch(r.URL)
	if !watch {
		p.mu.Lock()
		p.requests[r.Method+" "+r.URL.Path]++
		p.mu.Unlock()
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, "e2e api proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	if !watch || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(flushWriter{w}, resp.Body)
		return
	}
	p.stream(w, r, resp.Body)
}

func isWatch(u *url.URL) bool {
	v := u.Query().Get("watch")
	return v == "true" || v == "1" || strings.Contains(u.Path, "/watch/")
}

// stream passes a watch stream on event by event, as the rules say.
func (p *APIProxy) stream(w http.ResponseWriter, r *http.Request, body io.Reader) {
	s := &WatchStream{Proto: r.Proto, Path: r.URL.Path, Query: r.URL.Query(), Started: time.Now()}
	segments := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	s.Resource = segments[len(segments)-1]
	for i := 0; i+1 < len(segments); i++ {
		if segments[i] == "namespaces" && i+2 < len(segments) {
			s.Namespace = segments[i+1]
		}
	}
	p.mu.Lock()
	s.ID = len(p.streams) + 1
	p.streams = append(p.streams, s)
	p.mu.Unlock()
	defer s.ended.Store(true)

	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	// Read the API server's events as they come, whatever the client is
	// let see: what is held waits here, and the API server never finds
	// this watcher slow.
	go func() {
		reader := bufio.NewReaderSize(body, 64<<10)
		for {
			line, err := reader.ReadBytes('\n')
			p.mu.Lock()
			if len(line) > 0 {
				s.queue = append(s.queue, queued{line: line})
			}
			if err != nil {
				s.done = true
			}
			p.cond.Broadcast()
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	stop := context.AfterFunc(r.Context(), func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	for {
		next, state := p.next(s, r.Context())
		switch state {
		case streamEnded:
			return
		case streamCut:
			// The connection (or the HTTP/2 stream) is reset.
			panic(http.ErrAbortHandler)
		}
		if !next.decided {
			p.mu.Lock()
			filter := p.filter
			p.mu.Unlock()
			verdict := Pass
			if filter != nil {
				verdict = filter(parseEvent(s, next.line))
			}
			switch verdict {
			case Drop:
				s.Dropped.Add(1)
				continue
			case Hold:
				p.mu.Lock()
				s.queue = append([]queued{{line: next.line, decided: true}}, s.queue...)
				s.held = true
				p.mu.Unlock()
				continue
			}
		}
		if _, err := w.Write(next.line); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		s.Passed.Add(1)
		s.lastPass.Store(time.Now().UnixNano())
	}
}

type streamState int

const (
	streamFlowing streamState = iota
	streamEnded               // upstream done, client gone, or proxy closed
	streamCut                 // Cut: end it abruptly
)

// next waits for the next line the stream may pass on.
func (p *APIProxy) next(s *WatchStream, ctx context.Context) (queued, streamState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		select {
		case <-p.closed:
			return queued{}, streamEnded
		default:
		}
		if s.cut {
			return queued{}, streamCut
		}
		if ctx.Err() != nil {
			return queued{}, streamEnded
		}
		flowing := !s.held && (p.frozen == nil || !p.frozen(s))
		if flowing && len(s.queue) > 0 {
			q := s.queue[0]
			s.queue = s.queue[1:]
			return q, streamFlowing
		}
		if s.done && len(s.queue) == 0 {
			return queued{}, streamEnded
		}
		p.cond.Wait()
	}
}

func parseEvent(s *WatchStream, line []byte) WatchEvent {
	e := WatchEvent{Stream: s, Raw: line}
	var event struct {
		Type   string `json:"type"`
		Object struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name              string  `json:"name"`
				Namespace         string  `json:"namespace"`
				ResourceVersion   string  `json:"resourceVersion"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
		} `json:"object"`
	}
	if json.Unmarshal(line, &event) != nil {
		return e
	}
	e.Type, e.Kind = event.Type, event.Object.Kind
	m := event.Object.Metadata
	e.Namespace, e.Name, e.ResourceVersion, e.Deleting = m.Namespace, m.Name, m.ResourceVersion, m.DeletionTimestamp != nil
	return e
}

type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

// gatedListener's connections stall while the proxy is unreachable.
type gatedListener struct {
	net.Listener
	p *APIProxy
}

func (l *gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, p: l.p}, nil
}

type gatedConn struct {
	net.Conn
	p *APIProxy
}

// Read holds what arrived until the API server is reachable again.
func (c *gatedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.p.waitReachable()
	return n, err
}

func (c *gatedConn) Write(b []byte) (int, error) {
	c.p.waitReachable()
	return c.Conn.Write(b)
}
