-- Magnum 23.0.0 migration d7e6a4d39fe4: the cluster trust columns go away.
ALTER TABLE `cluster`
  DROP COLUMN `trust_id`,
  DROP COLUMN `trustee_username`,
  DROP COLUMN `trustee_user_id`,
  DROP COLUMN `trustee_password`;
UPDATE `alembic_version` SET `version_num` = 'd7e6a4d39fe4' WHERE `version_num` = 'c0f832afc4fd';
