/* mesh.c - the device mesh (PARALLEL.md section 2): world ranks laid out over the dims dp, pp,
 * cp, tp, ep by an order string, one communicator per dim and per flattened group named at
 * creation. Everything but creation is local: coordinates come from the layout formula, so
 * only the splits talk to the peers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "par.h"

#define MESH_DIMS ((int)loomMeshNumDims)
/* Megatron's default: TP fastest, so a TP group is consecutive ranks inside a node. */
#define MESH_DEFAULT_ORDER "tp-cp-ep-dp-pp"
/* User strings in messages are cut here, so a long one cannot push the values out. */
#define MESH_SHOWN 96

static const char* const mesh_dim_names[MESH_DIMS] = {"dp", "pp", "cp", "tp", "ep"};

struct mesh_group {
  char* name;          /* as the caller wrote it: GetGroup matches it exactly */
  int dims[MESH_DIMS]; /* as written, first fastest */
  int ndims;
  loomComm_t comm;
};

struct loomMesh {
  loomComm_t world; /* not owned */
  int rank, nranks;
  int sizes[MESH_DIMS], stride[MESH_DIMS], coord[MESH_DIMS];
  loomComm_t dims[MESH_DIMS];
  struct mesh_group* groups;
  int ngroups;
};

/* ---- Names ------------------------------------------------------------------------------- */

static const char* dim_name(int d) {
  return d >= 0 && d < MESH_DIMS ? mesh_dim_names[d] : "?";
}

static int dim_lookup(const char* s, size_t len) {
  for (int d = 0; d < MESH_DIMS; d++)
    if (strlen(mesh_dim_names[d]) == len && memcmp(s, mesh_dim_names[d], len) == 0) return d;
  return -1;
}

/* Parses a "-"-separated list of distinct dim names into dims[0..*n_out), first fastest. On
 * a bad list returns 0 with the reason in why (to follow the list's own name in a message). */
static int dims_parse(const char* s, int dims[MESH_DIMS], int* n_out, char* why, size_t len) {
  int n = 0, seen[MESH_DIMS] = {0};
  for (const char* p = s;; p++) {
    const char* end = strchr(p, '-');
    size_t tl = end ? (size_t)(end - p) : strlen(p);
    int d = dim_lookup(p, tl);
    if (tl == 0) {
      snprintf(why, len, "is missing a dim name (an empty one at position %d)", n);
      return 0;
    }
    if (d < 0) {
      snprintf(why, len, "names an unknown dim \"%.*s\" (known: dp, pp, cp, tp, ep)",
               (int)PAR_MIN(tl, (size_t)MESH_SHOWN), p);
      return 0;
    }
    if (seen[d]) {
      snprintf(why, len, "names dim \"%s\" twice", mesh_dim_names[d]);
      return 0;
    }
    seen[d] = 1;
    dims[n++] = d;
    if (end == NULL) break;
    p = end;
  }
  *n_out = n;
  return 1;
}

/* ---- Validation -------------------------------------------------------------------------- */

static loomResult_t mesh_check_sizes(loomComm_t world, const char* fn, const int* sizes, int n) {
  if (sizes == NULL) return par_err(world, fn, "sizes is NULL");
  for (int d = 0; d < MESH_DIMS; d++)
    if (sizes[d] < 1)
      return par_err(world, fn, "sizes[%s] (index %d) is %d, below 1", dim_name(d), d, sizes[d]);
  /* In double: exact while it matters (a product equal to an int is exact), never overflows. */
  double prod = 1;
  for (int d = 0; d < MESH_DIMS; d++) prod *= sizes[d];
  if (prod != (double)n)
    return par_err(world, fn,
                   "sizes (dp %d, pp %d, cp %d, tp %d, ep %d) multiply to %.17g but the size of "
                   "world is %d",
                   sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], prod, n);
  return loomSuccess;
}

/* The full order, fastest first: the named dims, then the left-out ones (all of size 1). */
static loomResult_t mesh_check_order(loomComm_t world, const char* fn, const int* sizes,
                                     const char* order, int full[MESH_DIMS]) {
  const char* s = order ? order : MESH_DEFAULT_ORDER;
  char why[256];
  int n = 0, named[MESH_DIMS] = {0};
  if (!dims_parse(s, full, &n, why, sizeof(why)))
    return par_err(world, fn, "order \"%.*s\" %s", MESH_SHOWN, s, why);
  for (int i = 0; i < n; i++) named[full[i]] = 1;
  for (int d = 0; d < MESH_DIMS; d++) {
    if (named[d]) continue;
    if (sizes[d] > 1)
      return par_err(world, fn,
                     "order \"%.*s\" leaves out dim \"%s\" of size %d (a dim left out must have "
                     "size 1)",
                     MESH_SHOWN, s, dim_name(d), sizes[d]);
    full[n++] = d;
  }
  return loomSuccess;
}

static loomResult_t mesh_check_groups(loomComm_t world, const char* fn, const char* const* groups,
                                      int* ngroups_out) {
  int g = 0, dims[MESH_DIMS], n;
  char why[256];
  for (; groups != NULL && groups[g] != NULL; g++)
    if (!dims_parse(groups[g], dims, &n, why, sizeof(why)))
      return par_err(world, fn, "groups[%d] \"%.*s\" %s", g, MESH_SHOWN, groups[g], why);
  *ngroups_out = g;
  return loomSuccess;
}

/* ---- Layout and communicators ------------------------------------------------------------ */

static void mesh_layout(struct loomMesh* m, const int full[MESH_DIMS]) {
  int stride = 1;
  for (int j = 0; j < MESH_DIMS; j++) {
    m->stride[full[j]] = stride;
    stride *= m->sizes[full[j]];
  }
  for (int d = 0; d < MESH_DIMS; d++) m->coord[d] = (m->rank / m->stride[d]) % m->sizes[d];
}

/* The ranks that agree with this one on every dim not in dims[0..n): the color is the member
 * whose named coordinates are all 0, and the key the mixed-radix number of the named
 * coordinates (first fastest), which is dense, so the new rank equals it. */
static loomResult_t mesh_split(struct loomMesh* m, const int* dims, int n, loomComm_t* comm_out) {
  int color = m->rank, key = 0, radix = 1;
  for (int i = 0; i < n; i++) {
    int d = dims[i];
    color -= m->coord[d] * m->stride[d];
    key += m->coord[d] * radix;
    radix *= m->sizes[d];
  }
  return loomCommSplit(m->world, color, key, comm_out, NULL);
}

/* Destroys what was made (all of it, even past a failure); the first failure is returned. */
static loomResult_t mesh_free(struct loomMesh* m) {
  loomResult_t first = loomSuccess, r;
  for (int d = 0; d < MESH_DIMS; d++)
    if (m->dims[d] != NULL && (r = loomCommDestroy(m->dims[d])) != loomSuccess &&
        first == loomSuccess)
      first = r;
  for (int g = 0; g < m->ngroups; g++) {
    struct mesh_group* grp = &m->groups[g];
    if (grp->comm != NULL && (r = loomCommDestroy(grp->comm)) != loomSuccess &&
        first == loomSuccess)
      first = r;
    free(grp->name);
  }
  free(m->groups);
  free(m);
  return first;
}

/* Records the (validated) groups; no communication. */
static loomResult_t mesh_groups_make(struct loomMesh* m, const char* fn, const char* const* groups,
                                     int ngroups) {
  char why[256];
  m->groups = calloc((size_t)(ngroups ? ngroups : 1), sizeof(*m->groups));
  if (m->groups == NULL)
    return par_fail(m->world, loomSystemError, fn, "out of memory for %d groups", ngroups);
  m->ngroups = ngroups;
  for (int g = 0; g < ngroups; g++) {
    struct mesh_group* grp = &m->groups[g];
    grp->name = strdup(groups[g]);
    if (grp->name == NULL)
      return par_fail(m->world, loomSystemError, fn, "out of memory for groups[%d]", g);
    dims_parse(groups[g], grp->dims, &grp->ndims, why, sizeof(why));
  }
  return loomSuccess;
}

/* Exactly 5 + ngroups splits of world, in the order every rank makes them: dp, pp, cp, tp,
 * ep, then the groups as listed. */
static loomResult_t mesh_comms_make(struct loomMesh* m) {
  for (int d = 0; d < MESH_DIMS; d++) {
    loomResult_t r = mesh_split(m, &d, 1, &m->dims[d]);
    if (r != loomSuccess) return r;
  }
  for (int g = 0; g < m->ngroups; g++) {
    struct mesh_group* grp = &m->groups[g];
    loomResult_t r = mesh_split(m, grp->dims, grp->ndims, &grp->comm);
    if (r != loomSuccess) return r;
  }
  return loomSuccess;
}

/* ---- Public calls ------------------------------------------------------------------------ */

loomResult_t loomMeshCreate(loomComm_t world, const int sizes[loomMeshNumDims], const char* order,
                            const char* const groups[], loomMesh_t* mesh) {
  static const char fn[] = "loomMeshCreate";
  int rank = 0, n = 0, full[MESH_DIMS], ngroups = 0;
  loomResult_t r = par_comm(world, fn, "world", &rank, &n);
  if (r != loomSuccess) return r;
  if (mesh == NULL) return par_err(world, fn, "mesh is NULL");
  if ((r = mesh_check_sizes(world, fn, sizes, n)) != loomSuccess) return r;
  if ((r = mesh_check_order(world, fn, sizes, order, full)) != loomSuccess) return r;
  if ((r = mesh_check_groups(world, fn, groups, &ngroups)) != loomSuccess) return r;

  struct loomMesh* m = calloc(1, sizeof(*m));
  if (m == NULL) return par_fail(world, loomSystemError, fn, "out of memory for the mesh");
  m->world = world;
  m->rank = rank;
  m->nranks = n;
  memcpy(m->sizes, sizes, sizeof(m->sizes));
  mesh_layout(m, full);
  r = mesh_groups_make(m, fn, groups, ngroups);
  if (r == loomSuccess) r = mesh_comms_make(m);
  if (r != loomSuccess) {
    mesh_free(m);
    return r;
  }
  *mesh = m;
  return loomSuccess;
}

/* A mesh call's common checks: the mesh, and dim when check_dim is set. */
static loomResult_t mesh_check_dim(loomMesh_t mesh, const char* fn, int check_dim, int dim) {
  if (mesh == NULL) return par_err(NULL, fn, "mesh is NULL");
  if (check_dim && (dim < 0 || dim >= MESH_DIMS))
    return par_err(mesh->world, fn, "dim is %d, outside [0, %d) (loomMeshDp..loomMeshEp)", dim,
                   MESH_DIMS);
  return loomSuccess;
}

loomResult_t loomMeshGetComm(loomMesh_t mesh, loomMeshDim_t dim, loomComm_t* comm) {
  loomResult_t r = mesh_check_dim(mesh, "loomMeshGetComm", 1, (int)dim);
  if (r != loomSuccess) return r;
  if (comm == NULL) return par_err(mesh->world, "loomMeshGetComm", "comm is NULL");
  *comm = mesh->dims[dim];
  return loomSuccess;
}

/* "\"dp-cp\", \"dp-ep\"" or "none", cut to fit buf: for the message of a group not found. */
static void mesh_group_list(const struct loomMesh* m, char* buf, size_t len) {
  size_t off = 0;
  buf[0] = '\0';
  for (int g = 0; g < m->ngroups && off < len; g++) {
    int w =
        snprintf(buf + off, len - off, "%s\"%.*s\"", g ? ", " : "", MESH_SHOWN, m->groups[g].name);
    if (w < 0) break;
    off += (size_t)w;
  }
  if (m->ngroups == 0) snprintf(buf, len, "none");
}

loomResult_t loomMeshGetGroup(loomMesh_t mesh, const char* dims, loomComm_t* comm) {
  static const char fn[] = "loomMeshGetGroup";
  loomResult_t r = mesh_check_dim(mesh, fn, 0, 0);
  if (r != loomSuccess) return r;
  if (dims == NULL) return par_err(mesh->world, fn, "dims is NULL");
  if (comm == NULL) return par_err(mesh->world, fn, "comm is NULL");
  for (int g = 0; g < mesh->ngroups; g++)
    if (strcmp(mesh->groups[g].name, dims) == 0) {
      *comm = mesh->groups[g].comm;
      return loomSuccess;
    }
  char named[256];
  mesh_group_list(mesh, named, sizeof(named));
  return par_err(mesh->world, fn,
                 "dims \"%.*s\" is not a group named at creation (named: %s; the string must "
                 "match as written: \"dp-cp\" and \"cp-dp\" are different groups)",
                 MESH_SHOWN, dims, named);
}

loomResult_t loomMeshGetCoord(loomMesh_t mesh, loomMeshDim_t dim, int* coord) {
  loomResult_t r = mesh_check_dim(mesh, "loomMeshGetCoord", 1, (int)dim);
  if (r != loomSuccess) return r;
  if (coord == NULL) return par_err(mesh->world, "loomMeshGetCoord", "coord is NULL");
  *coord = mesh->coord[dim];
  return loomSuccess;
}

loomResult_t loomMeshGetSize(loomMesh_t mesh, loomMeshDim_t dim, int* size) {
  loomResult_t r = mesh_check_dim(mesh, "loomMeshGetSize", 1, (int)dim);
  if (r != loomSuccess) return r;
  if (size == NULL) return par_err(mesh->world, "loomMeshGetSize", "size is NULL");
  *size = mesh->sizes[dim];
  return loomSuccess;
}

loomResult_t loomMeshGetRankOf(loomMesh_t mesh, const int coords[loomMeshNumDims], int* worldRank) {
  static const char fn[] = "loomMeshGetRankOf";
  loomResult_t r = mesh_check_dim(mesh, fn, 0, 0);
  if (r != loomSuccess) return r;
  if (coords == NULL) return par_err(mesh->world, fn, "coords is NULL");
  if (worldRank == NULL) return par_err(mesh->world, fn, "worldRank is NULL");
  int rank = 0;
  for (int d = 0; d < MESH_DIMS; d++) {
    if (coords[d] < 0 || coords[d] >= mesh->sizes[d])
      return par_err(mesh->world, fn, "coords[%s] (index %d) is %d, outside [0, %d)", dim_name(d),
                     d, coords[d], mesh->sizes[d]);
    rank += coords[d] * mesh->stride[d];
  }
  *worldRank = rank;
  return loomSuccess;
}

loomResult_t loomMeshGetCoordsOf(loomMesh_t mesh, int worldRank, int coords[loomMeshNumDims]) {
  static const char fn[] = "loomMeshGetCoordsOf";
  loomResult_t r = mesh_check_dim(mesh, fn, 0, 0);
  if (r != loomSuccess) return r;
  if (worldRank < 0 || worldRank >= mesh->nranks)
    return par_err(mesh->world, fn, "worldRank is %d, outside [0, %d) (the world's size)",
                   worldRank, mesh->nranks);
  if (coords == NULL) return par_err(mesh->world, fn, "coords is NULL");
  for (int d = 0; d < MESH_DIMS; d++) coords[d] = (worldRank / mesh->stride[d]) % mesh->sizes[d];
  return loomSuccess;
}

/* Local: each communicator is released on its own, as loomCommDestroy does; world stays. */
loomResult_t loomMeshDestroy(loomMesh_t mesh) {
  if (mesh == NULL) return par_err(NULL, "loomMeshDestroy", "mesh is NULL");
  return mesh_free(mesh);
}
