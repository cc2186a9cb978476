package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CA is a certificate authority made for one run.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
}

// NewCA makes a self-signed CA named cn.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pemBlock("CERTIFICATE", der)}, nil
}

// Serving makes a serving certificate for the names and addresses; it
// returns the certificate and key in PEM.
func (ca *CA) Serving(cn string, dns []string, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("PRIVATE KEY", keyDER), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

// RandomToken is a 32-hex-digit secret.
func RandomToken() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// PKI is what the control plane is started with, written under Dir.
type PKI struct {
	Dir        string
	CA         *CA
	CAFile     string
	ServerCert string
	ServerKey  string
	SAKey      string // service-account signing key (private)
	SAPub      string // its public key, for verification
	TokenFile  string // --token-auth-file
	AdminToken string
	KCMToken   string
	// An admin of its own for the ownerguard the lookup scenarios serve
	// "with the admin kubeconfig", so that the audit log tells its
	// requests apart.
	OwnerguardAdminToken string
	AuditPolicy          string
}

// NewPKI writes a fresh CA, the API server's serving certificate, a fresh
// service-account key pair and the static tokens.
func NewPKI(dir string, nodeIP, serviceIP net.IP, extra []Identity, policy string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := NewCA("e2e-cluster-ca")
	if err != nil {
		return nil, err
	}
	p := &PKI{
		Dir:                  dir,
		CA:                   ca,
		CAFile:               filepath.Join(dir, "ca.crt"),
		ServerCert:           filepath.Join(dir, "apiserver.crt"),
		ServerKey:            filepath.Join(dir, "apiserver.key"),
		SAKey:                filepath.Join(dir, "sa.key"),
		SAPub:                filepath.Join(dir, "sa.pub"),
		TokenFile:            filepath.Join(dir, "tokens.csv"),
		AuditPolicy:          filepath.Join(dir, "audit-policy.yaml"),
		AdminToken:           RandomToken(),
		KCMToken:             RandomToken(),
		OwnerguardAdminToken: RandomToken(),
	}
	certPEM, keyPEM, err := ca.Serving("kube-apiserver",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), nodeIP, serviceIP})
	if err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	// The admin is in system:masters; the controller manager is the user
	// the bootstrap RBAC policy binds its roles to.
	tokens := fmt.Sprintf("%s,e2e-admin,e2e-admin,\"system:masters\"\n%s,system:kube-controller-manager,system:kube-controller-manager\n%s,%s,%s,\"system:masters\"\n",
		p.AdminToken, p.KCMToken, p.OwnerguardAdminToken, OwnerguardAdmin, OwnerguardAdmin)
	for _, id := range extra {
		tokens += fmt.Sprintf("%s,%s,%s,\"%s\"\n", id.Token, id.User, id.User, strings.Join(id.Groups, ","))
	}
	if policy == "" {
		policy = auditPolicy
	}
	files := map[string][]byte{
		p.CAFile:      ca.CertPEM,
		p.ServerCert:  certPEM,
		p.ServerKey:   keyPEM,
		p.SAKey:       pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)),
		p.SAPub:       pemBlock("PUBLIC KEY", saPub),
		p.TokenFile:   []byte(tokens),
		p.AuditPolicy: []byte(policy),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Identity is one more static token of the API server: its user and
// groups (Config.Identities).
type Identity struct {
	Token, User string
	Groups      []string
}

// OwnerguardAdmin is the user of PKI.OwnerguardAdminToken.
const OwnerguardAdmin = "e2e-ownerguard-admin"

// What the API server writes to its audit log: the admission-relevant
// requests on the objects the scenarios create (with the annotations the
// webhooks added), and everything ownerguard's own identity asks.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts:ownerguard"]
  - level: Metadata
    users: ["e2e-ownerguard-admin"]
  - level: Metadata
    verbs: ["create", "update", "patch", "delete"]
    resources:
      - group: ""
        resources: ["pods", "configmaps"]
      - group: "batch"
        resources: ["jobs", "cronjobs"]
      - group: "apps"
        resources: ["deployments", "replicasets"]
  - level: None
`

// Kubeconfig writes a kubeconfig for server with a bearer token.
func Kubeconfig(path, server, caFile, token string) error {
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: e2e
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: e2e
current-context: e2e
`, server, caFile, token)
	return os.WriteFile(path, []byte(text), 0o600)
}
