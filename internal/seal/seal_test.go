package seal

import "testing"

func TestSealOpen(t *testing.T) {
	kp, err := NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	s, err := To(kp.Public(), []byte("hunter2"), []byte("job/0/node-1/secret"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := kp.Open(s, []byte("job/0/node-1/secret")); err != nil || string(p) != "hunter2" {
		t.Fatalf("open: %q %v", p, err)
	}
	if _, err := kp.Open(s, []byte("other/0/node-1/secret")); err == nil {
		t.Fatal("opened with another context")
	}
	other, _ := NewKeyPair()
	if _, err := other.Open(s, []byte("job/0/node-1/secret")); err == nil {
		t.Fatal("opened with another key")
	}
	b, _ := NewBox(NewKey())
	c := b.Seal([]byte("x"), []byte("j1"))
	if p, err := b.Open(c, []byte("j1")); err != nil || string(p) != "x" {
		t.Fatalf("box: %q %v", p, err)
	}
	if _, err := b.Open(c, []byte("j2")); err == nil {
		t.Fatal("box opened with another context")
	}
}
