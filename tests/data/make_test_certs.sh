#!/bin/sh
# Makes a throwaway CA, a server certificate for localhost/127.0.0.1 and a client certificate in
# the current directory (ca.pem, server.pem/.key, client.pem/.key), for the TLS tests.
set -e
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=manyshot-test-ca \
  -keyout ca.key -out ca.pem 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > server.ext
openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out server.csr \
  2>/dev/null
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
  -extfile server.ext -out server.pem 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl req -newkey rsa:2048 -nodes -subj /CN=manyshot-test-client -keyout client.key \
  -out client.csr 2>/dev/null
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
  -extfile client.ext -out client.pem 2>/dev/null
