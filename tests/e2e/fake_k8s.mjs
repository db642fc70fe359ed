// Files for the fake Kubernetes API server (tests/fake_k8s/fake_apiserver.py), shared by the
// end-to-end tests: a test CA with a server certificate for IP 127.0.0.1, the tokens file that
// grants kiln's service account exactly the Role of k8s/manifests, and a kubeconfig for kiln.
import fs from "node:fs";
import path from "node:path";
import { sh } from "./agent_git.mjs";

/// The verbs of k8s/manifests' Role.
export const KILN_ROLE = {
  "deployments.apps": ["get", "list", "watch", "patch"], "replicasets.apps": ["get", "list", "watch"],
  pods: ["get", "list", "watch"], events: ["get", "list", "watch"], "pods/log": ["get"],
};

/// Writes <dir>/ca.crt (+ ca.key) and the API server's <dir>/api.crt and api.key
/// (subjectAltName IP:127.0.0.1), and <dir>/tokens.json granting each of `tokens` KILN_ROLE.
export function writeFakeApiFiles(dir, tokens, caName = "kiln-test-ca") {
  const o = (...a) => sh("openssl", a, { cwd: dir });
  o("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", `/CN=${caName}`);
  o("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "api.key", "-out", "api.csr", "-subj", "/CN=kube-apiserver");
  fs.writeFileSync(path.join(dir, "san.ext"), "subjectAltName=IP:127.0.0.1\n");
  o("x509", "-req", "-in", "api.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "api.crt", "-days", "2", "-extfile", "san.ext");
  const entries = Object.fromEntries(tokens.map((t) => [t, { user: "system:serviceaccount:loop:kiln", allow: KILN_ROLE }]));
  fs.writeFileSync(path.join(dir, "tokens.json"), JSON.stringify({ tokens: entries }));
  // Key files beside a kubeconfig are credentials to kiln's check-config: owner-only.
  for (const k of ["ca.key", "api.key"]) fs.chmodSync(path.join(dir, k), 0o600);
}

/// A kubeconfig (namespace "loop") for the fake API server on 127.0.0.1:<port> with the CA of
/// writeFakeApiFiles(dir) and a bearer token.
export function kubeconfig(dir, port, token) {
  return ["apiVersion: v1", "kind: Config", "current-context: test",
    "clusters:", "- name: fake", "  cluster:", `    server: https://127.0.0.1:${port}`, `    certificate-authority: ${path.join(dir, "ca.crt")}`,
    "users:", "- name: kiln", "  user:", `    token: ${token}`,
    "contexts:", "- name: test", "  context:", "    cluster: fake", "    user: kiln", "    namespace: loop", ""].join("\n");
}
