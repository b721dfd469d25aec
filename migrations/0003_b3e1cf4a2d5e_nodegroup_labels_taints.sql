-- Magnum 23.0.0 migration b3e1cf4a2d5e: per-nodegroup Kubernetes node labels
-- and taints (JSON TEXT; NULL in rows older than this migration).
ALTER TABLE `nodegroup`
  ADD COLUMN `node_labels` TEXT NULL,
  ADD COLUMN `node_taints` TEXT NULL;
UPDATE `alembic_version` SET `version_num` = 'b3e1cf4a2d5e' WHERE `version_num` = 'd7e6a4d39fe4';
