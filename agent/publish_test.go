package agent

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func TestStoreReply(t *testing.T) {
	cases := []struct {
		name    string
		reply   string
		wantErr string // "" for none
	}{
		{"stored", `{}`, ""},
		{"error", `{"error":"malformed result"}`, "malformed result"},
		{"empty", ``, "undecodable"},
		{"garbage", `hello`, "undecodable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := storeReply([]byte(c.reply))
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("storeReply(%s) = %v, want nil", c.reply, err)
			case c.wantErr != "" && (err == nil || !contains(err.Error(), c.wantErr)):
				t.Errorf("storeReply(%s) = %v, want an error with %q", c.reply, err, c.wantErr)
			}
		})
	}
}

// A final result is stored by the controller in the results stream with a
// message id of its making, so a report repeated after a lost answer is not
// stored twice.
func TestFinalStoredWithMsgID(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startAgent("msgid1", nil)
	h.send(api.NodeCommandSubject("msgid1", "ping", "echo"), echo("jmsgid"))
	if r := h.final("jmsgid", "msgid1", 10*time.Second); r.Status != api.StepSuccess {
		t.Fatalf("result %+v, want success", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := h.js.Stream(ctx, api.StreamResults)
	if err != nil {
		t.Fatal(err)
	}
	subject := api.ResultSubject("jmsgid")
	stored, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatalf("stored result: %v", err)
	}
	const wantID = "jmsgid.0.msgid1.1"
	if got := stored.Header.Get(nats.MsgIdHdr); got != wantID {
		t.Errorf("stored %s = %q, want %q", nats.MsgIdHdr, got, wantID)
	}
	// The same report again, as a retry after a lost answer would send it:
	// answered, not stored a second time.
	report := api.ReportSubject("jmsgid", 0, "msgid1")
	again := &nats.Msg{Subject: report, Data: stored.Data}
	if err := a.publishStored(again); err != nil {
		t.Fatalf("reporting again: %v", err)
	}
	after, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if after.Sequence != stored.Sequence {
		t.Errorf("a repeated report was stored again: sequence %d, then %d", stored.Sequence, after.Sequence)
	}
	// One sent again for a repeated command is stored again.
	resent := &nats.Msg{Subject: report, Data: stored.Data, Header: nats.Header{api.ReportResendHdr: {"1"}}}
	if err := a.publishStored(resent); err != nil {
		t.Fatalf("resending: %v", err)
	}
	if last, err := stream.GetLastMsgForSubject(ctx, subject); err != nil || last.Sequence == stored.Sequence {
		t.Errorf("a resent result was not stored (%v)", err)
	}
	// Nobody takes this subject: an error, not an acknowledgement.
	if err := a.publishStored(&nats.Msg{Subject: "nostream.x", Data: []byte("x")}); err == nil {
		t.Error("publishing where no controller listens succeeded")
	}
}
