{{/* Names, labels, images and the pieces every component's pod shares. */}}

{{- define "ureplicator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ureplicator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
<fullname>-<component>. The full name is cut to 42 characters so that the longest name
(<fullname>-verifier-reports) stays within 63 and the CronJob's within 52 (its Jobs add 11).
*/}}
{{- define "ureplicator.componentName" -}}
{{- printf "%s-%s" (include "ureplicator.fullname" .root | trunc 42 | trimSuffix "-") .component -}}
{{- end -}}

{{- define "ureplicator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "worker"). */}}
{{- define "ureplicator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ureplicator.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of an object; component may be empty for shared objects. */}}
{{- define "ureplicator.labels" -}}
helm.sh/chart: {{ include "ureplicator.chart" .root }}
app.kubernetes.io/name: {{ include "ureplicator.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: ureplicator
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ureplicator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ureplicator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* registry/repository:tag or @digest; call with (dict "root" $ "image" .Values.image). */}}
{{- define "ureplicator.image" -}}
{{- $ref := .image.repository -}}
{{- with .image.registry }}{{ $ref = printf "%s/%s" . $ref }}{{ end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $ref .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $ref (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Where the ConfigMap's config.yaml is mounted; every process gets --config with it. */}}
{{- define "ureplicator.configPath" -}}/etc/ureplicator/config.yaml{{- end -}}

{{/*
The clusters this release uses: [[<role>, <cluster>, <key in clusters>, <env prefix of its secret
properties>], ...]. Without `routes`, the config's two sections: roles "source" and "destination"
(UREPLICATOR_SOURCE_PROPERTIES_*). With `routes`, every cluster a route names, in order, each under
`clusters.<alias>` of the config (UREPLICATOR_CLUSTERS_<ALIAS>_PROPERTIES_*), its role a DNS-safe
form of its key (the TLS volumes' names and directories).
Call as `include "ureplicator.roles" . | fromJsonArray`; it validates the values first.
*/}}
{{- define "ureplicator.roles" -}}
{{- include "ureplicator.validate" . -}}
{{- if .Values.routes -}}
{{- $roles := list -}}
{{- $seen := dict -}}
{{- range $route := .Values.routes -}}
{{- range $key := list $route.source $route.destination -}}
{{- if not (hasKey $seen $key) -}}
{{- $_ := set $seen $key true -}}
{{- $cluster := index $.Values.clusters $key -}}
{{- $alias := default $key $cluster.alias -}}
{{- $role := $key | lower | replace "_" "-" | replace "." "-" | trunc 40 | trimSuffix "-" -}}
{{- $env := printf "UREPLICATOR_CLUSTERS_%s_PROPERTIES_" ($alias | upper | replace "-" "_") -}}
{{- $roles = append $roles (list $role $cluster $key $env) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $roles | toJson -}}
{{- else -}}
{{- list (list "source" (index .Values.clusters .Values.sourceCluster) .Values.sourceCluster "UREPLICATOR_SOURCE_PROPERTIES_") (list "destination" (index .Values.clusters .Values.targetCluster) .Values.targetCluster "UREPLICATOR_DESTINATION_PROPERTIES_") | toJson -}}
{{- end -}}
{{- end -}}

{{/*
librdkafka properties of one cluster: what tls and authentication imply, then the user's
properties on top. Secrets are not here: they are environment variables (ureplicator.clusterEnv).
Call with (dict "role" "source" "cluster" $cluster); prints YAML.
*/}}
{{- define "ureplicator.clusterProperties" -}}
{{- $c := .cluster -}}
{{- $tls := $c.tls | default dict -}}
{{- $auth := $c.authentication | default dict -}}
{{- $type := $auth.type | default "none" -}}
{{- $dir := printf "/etc/ureplicator/tls/%s" .role -}}
{{- $props := dict -}}
{{- if eq $type "tls" -}}
{{- $ck := $auth.certificateAndKey | default dict -}}
{{- $_ := set $props "security.protocol" "SSL" -}}
{{- $_ := set $props "ssl.certificate.location" (printf "%s/client/%s" $dir ($ck.certificate | default "tls.crt")) -}}
{{- $_ := set $props "ssl.key.location" (printf "%s/client/%s" $dir ($ck.key | default "tls.key")) -}}
{{- else if ne $type "none" -}}
{{- $_ := set $props "security.protocol" (ternary "SASL_SSL" "SASL_PLAINTEXT" (default false $tls.enabled)) -}}
{{- $_ := set $props "sasl.mechanism" (get (dict "plain" "PLAIN" "scram-sha-256" "SCRAM-SHA-256" "scram-sha-512" "SCRAM-SHA-512") $type) -}}
{{- $_ := set $props "sasl.username" $auth.username -}}
{{- else if $tls.enabled -}}
{{- $_ := set $props "security.protocol" "SSL" -}}
{{- end -}}
{{- with $tls.trustedCertificate -}}
{{- if .secretName -}}
{{- $_ := set $props "ssl.ca.location" (printf "%s/ca/%s" $dir (.certificate | default "ca.crt")) -}}
{{- end -}}
{{- end -}}
{{- range $k, $v := $c.properties -}}
{{- $_ := set $props $k $v -}}
{{- end -}}
{{- toYaml $props -}}
{{- end -}}

{{/* The config file every process reads (docs/configuration.md); only keys the loader knows. */}}
{{- define "ureplicator.config" -}}
{{- $sections := dict -}}
{{- $clusters := dict -}}
{{- range $pair := include "ureplicator.roles" . | fromJsonArray -}}
{{- $role := index $pair 0 -}}
{{- $cluster := index $pair 1 -}}
{{- $alias := default (index $pair 2) $cluster.alias -}}
{{- $properties := include "ureplicator.clusterProperties" (dict "role" $role "cluster" $cluster) | fromYaml -}}
{{- $_ := set $sections $role (dict "alias" $alias "bootstrap_servers" $cluster.bootstrapServers
      "properties" $properties) -}}
{{- $_ := set $clusters $alias (dict "bootstrap_servers" $cluster.bootstrapServers "properties" $properties) -}}
{{- end -}}
{{- $controller := deepCopy (.Values.controller.config | default dict) -}}
{{- $_ := set $controller "rest_port" .Values.controller.containerPorts.http -}}
{{- if .Values.controller.verificationReports.enabled -}}
{{- $_ := set $controller "verification_dir" "/reports" -}}
{{- end -}}
{{- with .Values.controller.tls -}}
{{- if .enabled -}}
{{- $_ := set $controller "rest_tls_certfile" (printf "/etc/ureplicator/tls/rest/%s" .certificate) -}}
{{- $_ := set $controller "rest_tls_keyfile" (printf "/etc/ureplicator/tls/rest/%s" .key) -}}
{{- end -}}
{{- end -}}
{{- $worker := deepCopy (.Values.worker.config | default dict) -}}
{{- $_ := set $worker "metrics_port" .Values.worker.containerPorts.metrics -}}
{{- $config := dict
      "pipeline" .Values.pipeline
      "zookeeper" .Values.zookeeper
      "source" $sections.source
      "destination" $sections.destination
      "controller" $controller
      "worker" $worker -}}
{{- if .Values.routes -}}
{{- /* Many routes (docs/routes.md): every cluster a route names, and the routes themselves. The
       config then has no source/destination sections, and naming is set per route, not on the
       controller (common.config refuses both next to routes). */ -}}
{{- $_ := unset $config "source" -}}
{{- $_ := unset $config "destination" -}}
{{- $_ := unset $controller "topic_naming" -}}
{{- $_ := unset $controller "topic_mapping" -}}
{{- $routes := list -}}
{{- range $route := .Values.routes -}}
{{- $entry := dict "id" $route.id
      "source" (default $route.source (index $.Values.clusters $route.source).alias)
      "destination" (default $route.destination (index $.Values.clusters $route.destination).alias) -}}
{{- with $route.topic_naming }}{{ $_ := set $entry "topic_naming" . }}{{ end -}}
{{- with $route.forward }}{{ $_ := set $entry "forward" . }}{{ end -}}
{{- /* RouteConfig's other keys (common/config.py): without them topic_naming: mapping ran on an
       empty map. shared is set only when given: false is the loader's default. */ -}}
{{- with $route.topic_mapping }}{{ $_ := set $entry "topic_mapping" . }}{{ end -}}
{{- with $route.workers }}{{ $_ := set $entry "workers" . }}{{ end -}}
{{- if hasKey $route "shared" }}{{ $_ := set $entry "shared" $route.shared }}{{ end -}}
{{- $routes = append $routes $entry -}}
{{- end -}}
{{- $_ := set $config "clusters" $clusters -}}
{{- $_ := set $config "routes" $routes -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The controller's admin token (controller.adminToken), for its container and its checks. */}}
{{- define "ureplicator.adminTokenEnv" -}}
{{- with .Values.controller.adminToken.existingSecret }}
- name: UREPLICATOR_CONTROLLER_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.controller.adminToken.key }}
{{- end }}
{{- end -}}

{{/*
`ureplicator check` before the process starts (preflight.initContainer): same image, config,
environment and mounts as the container it guards. Call with the component's context.
*/}}
{{- define "ureplicator.preflightInitContainer" -}}
{{- if .root.Values.preflight.initContainer }}
initContainers:
  - name: preflight
    image: {{ include "ureplicator.image" (dict "root" .root "image" .root.Values.image) }}
    imagePullPolicy: {{ .root.Values.image.pullPolicy }}
    {{- /* --role: a worker serves no REST API, so its check skips the controller's admin-token rule;
           the controller's check gets the token the controller gets, to pass that rule as it will. */}}
    args: ["check", "--config", {{ include "ureplicator.configPath" .root | quote }}, "--timeout", {{ .root.Values.preflight.timeoutSeconds | toString | quote }}, "--role", {{ ternary "worker" "controller" (eq .component "worker") | quote }}]
    env:
      {{- include "ureplicator.commonEnv" . | nindent 6 }}
      {{- if ne .component "worker" }}
      {{- include "ureplicator.adminTokenEnv" .root | trim | nindent 6 }}
      {{- end }}
    {{- with .root.Values.preflight.resources }}
    resources:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- include "ureplicator.containerSecurityContext" .values.containerSecurityContext | trim | nindent 4 }}
    volumeMounts:
      {{- include "ureplicator.commonVolumeMounts" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/*
Secrets as UREPLICATOR_<SOURCE|DESTINATION>_PROPERTIES_<NAME> variables: the loader turns the
name back into the librdkafka property (underscores -> dots, lower case), so passwords never
sit in the ConfigMap. Every component needs them: the controller's admin clients, the workers
and the verifier all connect to both clusters.
*/}}
{{- define "ureplicator.clusterEnv" -}}
{{- range $pair := include "ureplicator.roles" . | fromJsonArray }}
{{- $prefix := index $pair 3 }}
{{- $cluster := index $pair 1 }}
{{- $auth := $cluster.authentication | default dict }}
{{- if has ($auth.type | default "none") (list "plain" "scram-sha-256" "scram-sha-512") }}
- name: {{ $prefix }}SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $auth.passwordSecret.secretName }}
      key: {{ $auth.passwordSecret.password | default "password" }}
{{- end }}
{{- range $property, $ref := $cluster.secretProperties }}
- name: {{ $prefix }}{{ $property | upper | replace "." "_" }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.secretName }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Secret volumes with the CA bundle and client certificate of each cluster that has them. */}}
{{- define "ureplicator.tlsVolumes" -}}
{{- range $pair := include "ureplicator.roles" . | fromJsonArray }}
{{- $role := index $pair 0 }}
{{- $cluster := index $pair 1 }}
{{- $ca := ($cluster.tls | default dict).trustedCertificate | default dict }}
{{- if $ca.secretName }}
- name: tls-{{ $role }}-ca
  secret:
    secretName: {{ $ca.secretName }}
    defaultMode: 288 # 0440: readable by the pod's fsGroup only
{{- end }}
{{- $auth := $cluster.authentication | default dict }}
{{- if eq ($auth.type | default "none") "tls" }}
- name: tls-{{ $role }}-client
  secret:
    secretName: {{ $auth.certificateAndKey.secretName }}
    defaultMode: 288
{{- end }}
{{- end }}
{{- end -}}

{{- define "ureplicator.tlsVolumeMounts" -}}
{{- range $pair := include "ureplicator.roles" . | fromJsonArray }}
{{- $role := index $pair 0 }}
{{- $cluster := index $pair 1 }}
{{- $ca := ($cluster.tls | default dict).trustedCertificate | default dict }}
{{- if $ca.secretName }}
- name: tls-{{ $role }}-ca
  mountPath: /etc/ureplicator/tls/{{ $role }}/ca
  readOnly: true
{{- end }}
{{- if eq (($cluster.authentication | default dict).type | default "none") "tls" }}
- name: tls-{{ $role }}-client
  mountPath: /etc/ureplicator/tls/{{ $role }}/client
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{/*
Environment, volumes and mounts every component's container has: config file, /tmp (the root
filesystem is read-only), cluster secrets and TLS files, log level.
Call with (dict "root" $ "values" .Values.<component>).
*/}}
{{- define "ureplicator.commonEnv" -}}
- name: UREPLICATOR_LOG_LEVEL
  value: {{ .root.Values.logLevel | quote }}
{{- with (.root.Values.zookeeperAuth | default dict).existingSecret }}
- name: UREPLICATOR_ZOOKEEPER_AUTH
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.root.Values.zookeeperAuth.key }}
{{- end }}
{{- include "ureplicator.clusterEnv" .root }}
{{- with .values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ureplicator.commonVolumes" -}}
- name: config
  configMap:
    name: {{ include "ureplicator.componentName" (dict "root" .root "component" "config") }}
- name: tmp
  emptyDir: {}
{{- include "ureplicator.tlsVolumes" .root }}
{{- with .values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ureplicator.commonVolumeMounts" -}}
- name: config
  mountPath: /etc/ureplicator/config.yaml
  subPath: config.yaml
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- include "ureplicator.tlsVolumeMounts" .root }}
{{- with .values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Pod-level fields shared by every component: (dict "root" $ "values" ... "component" ...). */}}
{{- define "ureplicator.podCommon" -}}
serviceAccountName: {{ include "ureplicator.serviceAccountName" .root }}
automountServiceAccountToken: {{ .root.Values.serviceAccount.automountServiceAccountToken }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .values.podSecurityContext.enabled }}
securityContext:
  {{- omit .values.podSecurityContext "enabled" | toYaml | nindent 2 }}
{{- end }}
{{- with .values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .values.affinity }}
affinity:
  {{- toYaml .values.affinity | nindent 2 }}
{{- else if has (.values.podAntiAffinityPreset | default "none") (list "soft" "hard") }}
affinity:
  podAntiAffinity:
    {{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "ureplicator.selectorLabels" . | fromYaml)) }}
    {{- if eq .values.podAntiAffinityPreset "hard" }}
    requiredDuringSchedulingIgnoredDuringExecution:
      {{- list $term | toYaml | nindent 6 }}
    {{- else }}
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          {{- toYaml $term | nindent 10 }}
    {{- end }}
{{- end }}
{{- end -}}

{{- define "ureplicator.containerSecurityContext" -}}
{{- if .enabled }}
securityContext:
  {{- omit . "enabled" | toYaml | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Pod template metadata: labels and a config checksum so a config change rolls the pods. */}}
{{- define "ureplicator.podMetadata" -}}
labels:
  {{- include "ureplicator.labels" . | nindent 2 }}
  {{- with .values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  checksum/config: {{ include "ureplicator.config" .root | sha256sum }}
  {{- with .values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* Probe timing fields from a values probe block (without "enabled"). */}}
{{- define "ureplicator.probeTiming" -}}
{{- omit . "enabled" | toYaml -}}
{{- end -}}

{{/* spec of a PodDisruptionBudget from a values pdb block. */}}
{{- define "ureplicator.pdbSpec" -}}
{{- if not (eq (toString .pdb.minAvailable) "") }}
minAvailable: {{ .pdb.minAvailable }}
{{- end }}
{{- if not (eq (toString .pdb.maxUnavailable) "") }}
maxUnavailable: {{ .pdb.maxUnavailable }}
{{- end }}
{{- with .pdb.unhealthyPodEvictionPolicy }}
unhealthyPodEvictionPolicy: {{ . }}
{{- end }}
selector:
  matchLabels:
    {{- include "ureplicator.selectorLabels" . | nindent 4 }}
{{- end -}}

{{/* Worker grace period: the configured one, or stop_timeout_s (or the deprecated shutdown_timeout_s) + 30 (commit, deregister, close). */}}
{{- define "ureplicator.workerGracePeriod" -}}
{{- $shutdown := .Values.worker.config.shutdown_timeout_s | default .Values.worker.config.stop_timeout_s | default 30 | float64 -}}
{{- if eq (toString .Values.worker.terminationGracePeriodSeconds) "" -}}
{{- add (ceil $shutdown | int) 30 -}}
{{- else -}}
{{- .Values.worker.terminationGracePeriodSeconds | int -}}
{{- end -}}
{{- end -}}

{{/* A values scalar as text; whole numbers without Go's float formatting (1000000, not 1e+06). */}}
{{- define "ureplicator.scalar" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* The claim the verifier writes its reports to (and controllers may read them from). */}}
{{- define "ureplicator.reportsClaim" -}}
{{- .Values.verifier.reports.persistence.existingClaim | default (include "ureplicator.componentName" (dict "root" . "component" "verifier-reports")) -}}
{{- end -}}

{{/* spark.local.dir and the working directory of the verifier: an emptyDir (verifier.scratch). */}}
{{- define "ureplicator.verifierScratch" -}}/var/lib/ureplicator/spark{{- end -}}

{{/*
The verifier's container, shared by the CronJob (verifier.mode cronjob) and the warm verifier's
Deployment (verifier.mode warm). Call with (dict "root" $ "values" .Values.verifier "component"
"verifier" "every" <"" or a duration>): with every, `verify --every` keeps one driver and its
SparkSession and runs an incremental pass per interval.
*/}}
{{- define "ureplicator.verifierContainer" -}}
{{- $v := .values }}
{{- $scratch := include "ureplicator.verifierScratch" . -}}
- name: verifier
  image: {{ include "ureplicator.image" (dict "root" .root "image" $v.image) }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args:
    - verify
    {{- with .every }}
    - --every
    - {{ include "ureplicator.scalar" . | quote }}
    {{- end }}
    - --config
    - {{ include "ureplicator.configPath" .root | quote }}
    - --output
    - /reports
    {{- if gt (len (.root.Values.routes | default list)) 1 }}
    {{- /* Each route in turn, its reports in /reports/<route id>/ (what the controller serves for
           /routes/<id>/verification); one route keeps /reports itself. */}}
    - --all-routes
    {{- end }}
    - --master
    - {{ $v.spark.master | quote }}
    {{- /* --conf, not spark-defaults.conf: the verifier's own defaults are passed
           the same way and would win over a defaults file. */}}
    {{- range $key, $value := $v.spark.conf }}
    - --conf
    - {{ printf "%s=%s" $key (include "ureplicator.scalar" $value) | quote }}
    {{- end }}
    - --conf
    - "spark.local.dir={{ $scratch }}"
    {{- if not (hasPrefix "local" $v.spark.master) }}
    {{- /* Executors of the external cluster connect back to the driver in this pod
           (at SPARK_LOCAL_IP) on fixed ports, so a NetworkPolicy can allow them. */}}
    - --conf
    - "spark.driver.bindAddress=0.0.0.0"
    - --conf
    - "spark.driver.port={{ $v.spark.driverPort }}"
    - --conf
    - "spark.blockManager.port={{ $v.spark.blockManagerPort }}"
    {{- end }}
    {{- range $v.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  # Spark's derby/warehouse folders land in the working directory: keep it writable.
  workingDir: {{ $scratch }}
  {{- if not (hasPrefix "local" $v.spark.master) }}
  ports:
    - name: spark-driver
      containerPort: {{ $v.spark.driverPort }}
      protocol: TCP
    - name: spark-blockmgr
      containerPort: {{ $v.spark.blockManagerPort }}
      protocol: TCP
  {{- end }}
  env:
    # The address the driver advertises to executors.
    - name: SPARK_LOCAL_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    # The root filesystem is read-only; Ivy and Python caches go under HOME.
    - name: HOME
      value: /tmp
    {{- include "ureplicator.commonEnv" . | nindent 4 }}
  {{- with $v.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .every }}
  {{- $probe := $v.warm.livenessProbe }}
  {{- if $probe.enabled }}
  {{- /* Every run, even one that could not verify anything (status ERROR), appends a line to
         history.jsonl; summary.json changes only after a completed run, so a cluster outage would
         restart the pod for nothing. A driver that appended nothing for maxAgeSeconds, and has run
         that long, is stuck: the CronJob's activeDeadlineSeconds, for the warm verifier. */}}
  livenessProbe:
    exec:
      command:
        - python
        - -c
        - {{ include "ureplicator.verifierLivenessScript" . | quote }}
        - /reports/history.jsonl
        - {{ $probe.maxAgeSeconds | int | toString | quote }}
    {{- include "ureplicator.probeTiming" (omit $probe "maxAgeSeconds") | nindent 4 }}
  {{- end }}
  {{- end }}
  {{- include "ureplicator.containerSecurityContext" $v.containerSecurityContext | trim | nindent 2 }}
  volumeMounts:
    {{- include "ureplicator.commonVolumeMounts" . | nindent 4 }}
    - name: spark-scratch
      mountPath: {{ $scratch }}
    - name: reports
      mountPath: /reports
{{- end -}}

{{/*
The warm verifier's liveness check: exit 0 while FILE (argv 1) changed within SECONDS (argv 2), or
the container's first process (tini) started less than SECONDS ago (its first run, a full pass,
may take that long; an old history from before the pod does not count).
*/}}
{{- define "ureplicator.verifierLivenessScript" -}}
import os, sys, time
limit = float(sys.argv[2])
ticks = int(open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])
running = float(open('/proc/uptime').read().split()[0]) - ticks / os.sysconf('SC_CLK_TCK')
try:
    quiet = time.time() - os.stat(sys.argv[1]).st_mtime
except OSError:
    quiet = float('inf')
sys.exit(0 if min(quiet, running) < limit else 1)
{{- end -}}

{{- define "ureplicator.verifierVolumes" -}}
{{- $v := .values }}
{{- include "ureplicator.commonVolumes" . }}
- name: spark-scratch
  {{- if $v.scratch.sizeLimit }}
  emptyDir:
    sizeLimit: {{ $v.scratch.sizeLimit }}
  {{- else }}
  emptyDir: {}
  {{- end }}
- name: reports
  {{- if $v.reports.persistence.enabled }}
  persistentVolumeClaim:
    claimName: {{ include "ureplicator.reportsClaim" .root }}
  {{- else }}
  # Reports and the checkpoint vanish with the pod; only its status and logs remain.
  emptyDir: {}
  {{- end }}
{{- end -}}

{{/* A duration of `ureplicator verify --every` (90, 30s, 10m, 1h30m) in seconds. */}}
{{- define "ureplicator.durationSeconds" -}}
{{- $text := include "ureplicator.scalar" . | trim | lower -}}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?$" $text -}}
{{- $text -}}
{{- else -}}
{{- $units := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 "d" 86400.0 -}}
{{- $total := 0.0 -}}
{{- range $part := regexFindAll "[0-9]+(\\.[0-9]+)?(ms|s|m|h|d)" $text -1 -}}
{{- $unit := regexFind "(ms|s|m|h|d)$" $part -}}
{{- $total = addf $total (mulf (trimSuffix $unit $part | float64) (get $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}
{{- end -}}
