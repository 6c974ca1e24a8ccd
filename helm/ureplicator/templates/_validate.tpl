{{/*
Rules values.schema.json cannot express (they relate two values). Each failure names the
values key and says what to do. Included by "ureplicator.roles", which every template that
looks up a cluster calls first, so no template trips over a missing cluster before this runs.
*/}}
{{- define "ureplicator.validate" -}}
{{- $v := .Values -}}
{{- $names := keys $v.clusters | sortAlpha | join ", " -}}
{{- range $key := list "sourceCluster" "targetCluster" -}}
{{- $name := index $v $key -}}
{{- if not (hasKey $v.clusters $name) -}}
{{- fail (printf "%s: %q is not a key of clusters (clusters has: %s)" $key $name $names) -}}
{{- end -}}
{{- end -}}
{{- /* --- routes, worker pools, REST TLS (issue 27 / routes) --- */ -}}
{{- range $i, $route := $v.routes | default list -}}
{{- range $side := list "source" "destination" -}}
{{- if not (hasKey $v.clusters (index $route $side)) -}}
{{- fail (printf "routes[%d].%s: %q is not a key of clusters (clusters has: %s)" $i $side (index $route $side) $names) -}}
{{- end -}}
{{- end -}}
{{- /* common/config.py parse_route refuses this at start: the pods would crash-loop. */ -}}
{{- with $route.workers -}}
{{- if and .max (gt (int (.min | default 1)) (int .max)) -}}
{{- fail (printf "routes[%d].workers: min %d is above max %d (max 0: no upper bound)" $i (int (.min | default 1)) (int .max)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $i, $pool := $v.workerPools | default list -}}
{{- if and $pool.route $pool.pool -}}
{{- fail (printf "workerPools[%d]: a pool serves its route or joins the shared pool (pool: true), not both" $i) -}}
{{- end -}}
{{- if and (hasKey $pool "pool") (not $pool.pool) (not $pool.route) (gt (len ($v.routes | default list)) 1) -}}
{{- fail (printf "workerPools[%d]: with %d routes a worker serves one (route: <id>) or joins the shared pool (leave pool unset or true)" $i (len $v.routes)) -}}
{{- end -}}
{{- end -}}
{{- if and $v.workerPools $v.worker.autoscaling.enabled -}}
{{- fail "worker.autoscaling.enabled: not supported with workerPools (set each pool's replicas instead)" -}}
{{- end -}}
{{- if and $v.controller.tls.enabled (not $v.controller.tls.existingSecret) -}}
{{- fail "controller.tls.existingSecret: required when controller.tls.enabled (a Secret with the certificate and key)" -}}
{{- end -}}
{{- if eq $v.sourceCluster $v.targetCluster -}}
{{- fail (printf "targetCluster: must differ from sourceCluster (both are %q)" $v.sourceCluster) -}}
{{- end -}}
{{- $sourceAlias := default $v.sourceCluster (index $v.clusters $v.sourceCluster).alias -}}
{{- $targetAlias := default $v.targetCluster (index $v.clusters $v.targetCluster).alias -}}
{{- if eq $sourceAlias $targetAlias -}}
{{- fail (printf "clusters.%s.alias: the source and target aliases are both %q; they must differ (the provenance header and loop prevention use them)" $v.targetCluster $targetAlias) -}}
{{- end -}}
{{- $used := list $v.sourceCluster $v.targetCluster -}}
{{- range $route := $v.routes | default list -}}
{{- $used = append (append $used $route.source) $route.destination -}}
{{- end -}}
{{- range $name := $used | uniq -}}
{{- $c := index $v.clusters $name -}}
{{- $where := printf "clusters.%s" $name -}}
{{- $auth := $c.authentication | default dict -}}
{{- $type := $auth.type | default "none" -}}
{{- if has $type (list "plain" "scram-sha-256" "scram-sha-512") -}}
{{- if not $auth.username -}}
{{- fail (printf "%s.authentication.username: required for authentication type %s" $where $type) -}}
{{- end -}}
{{- if not ($auth.passwordSecret | default dict).secretName -}}
{{- fail (printf "%s.authentication.passwordSecret.secretName: required for authentication type %s (the Secret holding the SASL password)" $where $type) -}}
{{- end -}}
{{- if hasKey ($c.secretProperties | default dict) "sasl.password" -}}
{{- fail (printf "%s.secretProperties.sasl.password: already set by authentication.passwordSecret; remove one" $where) -}}
{{- end -}}
{{- end -}}
{{- if and (eq $type "tls") (not ($auth.certificateAndKey | default dict).secretName) -}}
{{- fail (printf "%s.authentication.certificateAndKey.secretName: required for authentication type tls" $where) -}}
{{- end -}}
{{- range $property, $_ := $c.properties -}}
{{- if eq $property "bootstrap.servers" -}}
{{- fail (printf "%s.properties.bootstrap.servers: set %s.bootstrapServers instead" $where $where) -}}
{{- end -}}
{{- if or (contains "password" $property) (contains "secret" $property) -}}
{{- fail (printf "%s.properties.%s: looks like a secret; put it in %s.secretProperties (a Secret reference) so it never sits in the ConfigMap" $where $property $where) -}}
{{- end -}}
{{- if hasKey ($c.secretProperties | default dict) $property -}}
{{- fail (printf "%s.properties.%s: also in secretProperties; keep one" $where $property) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $shutdown := $v.worker.config.shutdown_timeout_s | default $v.worker.config.stop_timeout_s | default 30 | float64 -}}
{{- $grace := $v.worker.terminationGracePeriodSeconds -}}
{{- if and (ne (toString $grace) "") (le ($grace | float64) $shutdown) -}}
{{- fail (printf "worker.terminationGracePeriodSeconds: %v must be larger than worker.config.stop_timeout_s (%v), or the kubelet kills workers before they commit their offsets" $grace $shutdown) -}}
{{- end -}}
{{- range $component := list "controller" "worker" -}}
{{- $pdb := (index $v $component).pdb | default dict -}}
{{- if and $pdb.create (ne (toString $pdb.minAvailable) "") (ne (toString $pdb.maxUnavailable) "") -}}
{{- fail (printf "%s.pdb: set minAvailable or maxUnavailable, not both" $component) -}}
{{- end -}}
{{- if and $pdb.create (eq (toString $pdb.minAvailable) "") (eq (toString $pdb.maxUnavailable) "") -}}
{{- fail (printf "%s.pdb: set minAvailable or maxUnavailable (or create: false)" $component) -}}
{{- end -}}
{{- end -}}
{{- $hpa := $v.worker.autoscaling | default dict -}}
{{- if and $hpa.enabled (gt ($hpa.minReplicas | int) ($hpa.maxReplicas | int)) -}}
{{- fail (printf "worker.autoscaling.minReplicas (%v) must not exceed maxReplicas (%v)" $hpa.minReplicas $hpa.maxReplicas) -}}
{{- end -}}
{{- if and $hpa.enabled (eq (toString $hpa.targetCPUUtilizationPercentage) "") (eq (toString $hpa.targetMemoryUtilizationPercentage) "") -}}
{{- fail "worker.autoscaling: set targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage" -}}
{{- end -}}
{{- $np := $v.networkPolicy | default dict -}}
{{- if and $np.enabled (not $np.allowExternal) $v.verifier.enabled (not (hasPrefix "local" $v.verifier.spark.master)) (not $np.sparkExecutorsFrom) -}}
{{- fail "networkPolicy.sparkExecutorsFrom: with allowExternal false and an external Spark master, list the peers (e.g. an ipBlock) of the Spark executors that connect back to the verifier's driver" -}}
{{- end -}}
{{- if $v.controller.verificationReports.enabled -}}
{{- $p := $v.verifier.reports.persistence -}}
{{- if not (and $v.verifier.enabled $p.enabled) -}}
{{- fail "controller.verificationReports.enabled: needs verifier.enabled and verifier.reports.persistence.enabled (the controllers read the verifier's report claim)" -}}
{{- end -}}
{{- if and (not $p.existingClaim) (not (has "ReadWriteMany" $p.accessModes)) -}}
{{- fail "controller.verificationReports.enabled: set verifier.reports.persistence.accessModes to [ReadWriteMany] (the verifier and every controller mount the claim, on any node)" -}}
{{- end -}}
{{- end -}}
{{- if and $v.verifier.enabled (eq $v.verifier.mode "warm") -}}
{{- $every := include "ureplicator.durationSeconds" $v.verifier.warm.every | float64 -}}
{{- if le $every 0.0 -}}
{{- fail (printf "verifier.warm.every: %v is not a positive duration (use e.g. 30s, 10m, 1h30m)" $v.verifier.warm.every) -}}
{{- end -}}
{{- $probe := $v.verifier.warm.livenessProbe -}}
{{- if and $probe.enabled (le ($probe.maxAgeSeconds | float64) $every) -}}
{{- fail (printf "verifier.warm.livenessProbe.maxAgeSeconds: %v must be larger than verifier.warm.every (%v = %vs) plus the longest pass, or the probe restarts a verifier that is only waiting for its next pass" $probe.maxAgeSeconds $v.verifier.warm.every $every) -}}
{{- end -}}
{{- end -}}
{{- if and $v.controller.adminToken.existingSecret (not $v.controller.adminToken.key) -}}
{{- fail "controller.adminToken.key: required with existingSecret" -}}
{{- end -}}
{{- $ctl := $v.controller.config | default dict -}}
{{- $loopback := has (toString ($ctl.rest_host | default "0.0.0.0")) (list "127.0.0.1" "localhost" "::1") -}}
{{- if not (or $v.controller.adminToken.existingSecret $ctl.allow_anonymous $loopback) -}}
{{- fail "controller.adminToken.existingSecret: required, or anyone who reaches the REST port can add and remove topics. Create a Secret with a token of 8+ characters (kubectl create secret generic mirror-admin --from-literal=token=\"$(openssl rand -hex 24)\") and set controller.adminToken.existingSecret=mirror-admin; or set controller.config.allow_anonymous=true if a NetworkPolicy or proxy guards the port (docs/security.md)" -}}
{{- end -}}
{{- if and $v.zookeeperAuth $v.zookeeperAuth.existingSecret (not $v.zookeeperAuth.key) -}}
{{- fail "zookeeperAuth.key: required with existingSecret" -}}
{{- end -}}
{{- end -}}
