package proc

import "sync"

// Tail is an io.Writer that keeps the last n bytes written to it.
type Tail struct {
	mu        sync.Mutex
	n         int
	buf       []byte
	truncated bool
}

// NewTail returns a Tail keeping n bytes.
func NewTail(n int) *Tail { return &Tail{n: n} }

// Write keeps the tail of p; it never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.n; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.truncated = true
	}
	return len(p), nil
}

// String returns the kept bytes, marked when earlier output was dropped.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.truncated {
		return "[…earlier output dropped…]\n" + string(t.buf)
	}
	return string(t.buf)
}

// Reset forgets everything written so far.
func (t *Tail) Reset() {
	t.mu.Lock()
	t.buf, t.truncated = t.buf[:0], false
	t.mu.Unlock()
}
