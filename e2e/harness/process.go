package harness

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Process is one long-running program of the test, its output in a log file.
type Process struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs bin with args, stdout and stderr appended to logDir/name.log,
// in a process group of its own so that Stop reaches its children too.
func Start(name, logDir string, env []string, bin string, args ...string) (*Process, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "\n=== %s start %s: %s %s\n", time.Now().Format(time.RFC3339Nano), name, bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid of the process.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Signal sends sig to the process alone.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Wait until the process ends, at most d; false when it is still running.
func (p *Process) Wait(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	if done, _ := p.Exited(); done {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	if !p.Wait(grace) {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		p.Wait(10 * time.Second)
	}
}

// Tail is the last n lines of the process's log.
func (p *Process) Tail(n int) string { return TailFile(p.Log, n) }

// TailFile is the last n lines of a file.
func TailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Until calls check every interval until it returns nil, ctx ends or d
// passes; the last error says why it never became true.
func Until(ctx context.Context, d, interval time.Duration, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not after %s: %v", what, d, last)
		case <-time.After(interval):
		}
	}
}

// WaitHTTP waits until url answers 200 (client may carry TLS and a token),
// failing early if the process exits.
func WaitHTTP(ctx context.Context, p *Process, client *http.Client, url, token string, d time.Duration) error {
	return Until(ctx, d, 250*time.Millisecond, p.Name+" ready at "+url, func() error {
		if done, err := p.Exited(); done {
			return fmt.Errorf("%s exited (%v); last lines:\n%s", p.Name, err, p.Tail(30))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return nil
	})
}

// Grep is the last n lines of a file containing pattern.
func Grep(path, pattern string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	var hits [][]byte
	for _, line := range bytes.Split(data, []byte("\n")) {
		if bytes.Contains(line, []byte(pattern)) {
			hits = append(hits, line)
		}
	}
	if len(hits) > n {
		hits = hits[len(hits)-n:]
	}
	return string(bytes.Join(hits, []byte("\n")))
}
